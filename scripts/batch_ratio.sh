#!/usr/bin/env bash
# The 16-sequence aggregate decode over the single stream (issue 15's "16 sequences >= 3x
# single-stream"), from `kvserve bench throughput`, in rounds run back to back so that both sides
# of a round see the same host: per round a single stream after a 1-token prompt (bench
# compare's decode-0), a single stream after a 128-token prompt (the batch's depth), and 16
# sequences of 128-token prompts, each generating 64 tokens; then per-round ratios
# (16 x single ms per step / 16-sequence ms per step) and their medians.
#
# usage: scripts/batch_ratio.sh KVSERVE MODEL.gguf [ROUNDS=5] [THREADS=2]
#   prints one line per round, then:
#   median: single-d0 <ms> single-d128 <ms> 16seq <ms> ratio-d0 <x> ratio-d128 <x>
# A shared VM moves one run by 5-25%: compare medians of several rounds, never one run.
set -euo pipefail
bin=$1
model=$2
rounds=${3:-5}
threads=${4:-2}
step_ms() {  # ms per decode-only step of one bench throughput run
  "$bin" bench throughput "$model" --threads "$threads" --output-len 64 "$@" 2>&1 |
    sed -n 's/.*sequences and \([0-9.]*\) ms per step.*/\1/p'
}
rows=$(mktemp /tmp/batch_ratio.XXXXXX)
trap 'rm -f "$rows"' EXIT
for r in $(seq 1 "$rounds"); do
  d0=$(step_ms --num-prompts 1 --input-len 1)
  d128=$(step_ms --num-prompts 1 --input-len 128)
  b16=$(step_ms --num-prompts 16 --input-len 128)
  echo "$d0 $d128 $b16" >>"$rows"
  awk -v r="$r" '{printf "round %d: single-d0 %s single-d128 %s 16seq %s ratio-d0 %.2f ratio-d128 %.2f\n",
                  r, $1, $2, $3, 16 * $1 / $3, 16 * $2 / $3}' <<<"$d0 $d128 $b16"
done
awk '{ d0[NR] = $1; d1[NR] = $2; b[NR] = $3; r0[NR] = 16 * $1 / $3; r1[NR] = 16 * $2 / $3 }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END { printf "median: single-d0 %.2f single-d128 %.2f 16seq %.2f ratio-d0 %.2f ratio-d128 %.2f\n",
        median(d0, NR), median(d1, NR), median(b, NR), median(r0, NR), median(r1, NR) }' "$rows"
