#!/usr/bin/env bash
# Runs every libFuzzer target from build-fuzz/ (scripts/build.sh fuzz) over its corpus in
# fuzz/corpus/<target>/. New inputs go to a temporary directory, never into the repository.
#   fuzz/run.sh                 # short fixed budget: 10 s per target (scripts/test.sh)
#   fuzz/run.sh --runs 10000000 # the long run of docs/reliability.md (per target)
#   fuzz/run.sh --seconds 600 gguf tokenizer   # some targets for a while
#   fuzz/run.sh --runs 10000000 --max-len 256 tokenizer   # shorter inputs (default 8192)
# Exits non-zero on the first crash, leak, timeout or sanitizer report (the reproducer is
# left in the working directory as crash-*/leak-*/timeout-*).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=(-max_total_time=10)
max_len=8192
seed=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) budget=(-runs="$2"); shift 2 ;;
    --seconds) budget=(-max_total_time="$2"); shift 2 ;;
    --max-len) max_len="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(gguf http_request json_request tier_record chat_template tokenizer)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  bin=build-fuzz/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: $bin missing (scripts/build.sh fuzz)" >&2; exit 1; }
  if [[ "$t" == tokenizer || "$t" == json_request ]] && [ ! -d ../shared/tokenizers ]; then
    echo "fuzz: $t skipped: it needs ../shared (the stories260K model, the tokenizer vocabularies)"
    continue
  fi
  mkdir -p "$work/$t"
  start=$(date +%s)
  log="$work/$t.log"
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$bin" "${budget[@]}" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 -seed="$seed" \
      -print_final_stats=1 "$work/$t" "fuzz/corpus/$t" > "$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "fuzz: $t ok: $runs executions, 0 crashes, $(( $(date +%s) - start )) s"
done
