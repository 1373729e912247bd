#!/usr/bin/env bash
# CPU time per decode step of a batched decode, by kernel group: what docs/PERFORMANCE.md's
# "dense / experts / attention" A/B numbers are. Samples `perf record -e cpu-clock` (no hardware
# counters needed) over `kvserve bench throughput` and keeps the samples of the last STEPS - 1
# decode steps (the first decode step and the prefill are left out), then sums them per symbol.
#
# usage: scripts/decode_step_profile.sh KVSERVE MODEL.gguf [SEQS=16] [THREADS=2] [--symbols]
#   prints: dense <ms> experts <ms> attn <ms> other <ms> total <ms> wall <ms per step>
#   (CPU ms per decode step; dense = the lanes rows of a batched step's dense Q4_K/Q6_K
#   matrices, experts = the gemv tiles, attn = decode attention); --symbols: per symbol instead.
# Needs `perf` (Debian: linux-perf). Alternate two binaries several times: the wall time of
# one run moves by 20% or more on a shared VM, the CPU time of a kernel group much less.
set -euo pipefail
bin=$1
model=$2
seqs=${3:-16}
threads=${4:-2}
mode=${5:-groups}
data=$(mktemp /tmp/decode_step_profile.XXXXXX)
trap 'rm -f "$data"' EXIT
line=$(perf record -q -e cpu-clock -F 2000 -o "$data" "$bin" bench throughput "$model" \
  --num-prompts "$seqs" --input-len 128 --output-len 64 --threads "$threads" 2>&1 |
  grep 'Decode-only')
ms=$(echo "$line" | sed -n 's/.*and \([0-9.]*\) ms per step.*/\1/p')
steps=62
last=$(perf script -i "$data" -F time 2>/dev/null | tail -1 | tr -d ':')
start=$(echo "$last - $steps * $ms / 1000" | bc -l)
end=$(echo "$last - 0.02" | bc -l)
perf script -i "$data" --time "$(printf %.6f "$start"),$(printf %.6f "$end")" -F ip,sym 2>/dev/null |
  sed -E 's/^ *[0-9a-f]+ +//; s/\(.*$//; s/<.*$//' | sort | uniq -c | sort -rn |
  awk -v steps="$steps" -v wall="$ms" -v mode="$mode" '
    { v = $1 / 2000 / steps * 1000 }
    mode == "--symbols" { printf "%8.3f ms  %s\n", v, $2 }
    /Lanes(Q4K|Q6K)::|LanesTile|LanesRows/ { d += v; t += v; next }
    /GemvTile/ { e += v; t += v; next }
    /DecodeHeads|AttendWorker|DecodePrefetch/ { a += v; t += v; next }
    { o += v; t += v }
    END {
      if (mode == "--symbols") printf "total %.2f ms CPU per step, wall %s ms\n", t, wall
      else printf "dense %.2f experts %.2f attn %.2f other %.2f total %.2f wall %s\n", d, e, a, o, t, wall
    }'
