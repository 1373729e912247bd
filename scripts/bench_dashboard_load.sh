#!/usr/bin/env bash
# The live dashboard's cost to decode throughput (docs/PERFORMANCE.md): one `kvserve serve` on a
# model, then `kvserve bench serve` runs alternating without and with N open dashboard event
# streams (GET /v1/kv/events, 4 events a second each), R pairs, interleaved (in ABBA order) so
# that the machine's drift hits both sides alike. Prints each run's output token throughput and
# TPOT, then the server's own CPU time for the N streams with the engine idle.
# Usage: scripts/bench_dashboard_load.sh [MODEL] [N=200] [R=3] [PROMPTS=32] [OUTPUT_LEN=256]
# (default MODEL: the 110m preset with random Q8_0 weights, written to /tmp by make-model)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/tools/kvserve
model=${1:-/tmp/kvserve_bench_110m_preset_q8_0.gguf}
clients=${2:-200}
pairs=${3:-3}
prompts=${4:-32}
output_len=${5:-256}
[ -f "$model" ] || "$bin" make-model --preset 110m --type q8_0 -o "$model" > /dev/null
log=$(mktemp)
"$bin" serve "$model" --port 0 > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1 || true)
  [ -n "$url" ] && curl -sf "$url/health" > /dev/null && break
  sleep 0.1
done
echo "server: $url ($(grep -o 'KV cache: [0-9]* tokens' "$log"), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
load=(--base-url "$url" --concurrency 8 --input-len 32 --output-len "$output_len")
"$bin" bench serve "${load[@]}" --num-prompts 8 > /dev/null 2>&1  # warm-up
load+=(--num-prompts "$prompts")
for i in $(seq "$pairs"); do
  order=(0 "$clients")
  (( i % 2 == 0 )) && order=("$clients" 0)  # ABBA: drift within a pair hits both sides alike
  for n in "${order[@]}"; do
    out=$("$bin" bench serve "${load[@]}" --dashboard-clients "$n" 2>/dev/null)
    tput=$(grep 'Output token throughput' <<< "$out" | awk '{print $NF}')
    tpot=$(grep '^TPOT' <<< "$out" | awk '{print $4}')
    events=$(grep -o '[0-9.]* events/s each' <<< "$out" || echo "-")
    echo "pair $i, $n dashboards: output $tput tok/s, TPOT mean $tpot ms, $events"
  done
done
# The server's own CPU for N streams with the engine idle (snapshots, encoding, writes): clock
# ticks of the process over 10 s without streams, then over 10 s with N (read by curl).
ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
a=$(ticks); sleep 10; b=$(ticks)
readers=()
for _ in $(seq "$clients"); do curl -sN "$url/v1/kv/events" > /dev/null & readers+=($!); done
sleep 2; c=$(ticks); sleep 10; d=$(ticks)
kill "${readers[@]}" 2>/dev/null || true
wait "${readers[@]}" 2>/dev/null || true
hz=$(getconf CLK_TCK)
echo "server CPU with the engine idle: $(( (b - a) * 1000 / hz / 10 )) ms/s without dashboards," \
  "$(( (d - c) * 1000 / hz / 10 )) ms/s with $clients"
