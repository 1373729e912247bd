#!/usr/bin/env bash
# The live dashboard's cost to decode throughput (docs/PERFORMANCE.md). Two `kvserve serve` on
# one model: one with the defaults (all event streams together get at most 200 events a second,
# --dashboard-events-per-s), one with no bound (--dashboard-events-per-s 0: every stream 4 a
# second). Then `kvserve bench serve` runs, R rounds, each round the three runs
#   0 dashboards (default server) | N dashboards (default server) | N dashboards (unbounded)
# in alternating order (ABC, CBA, ...) so that the machine's drift hits all alike; a dashboard
# is one GET /v1/kv/events stream held open by the benchmark. Only one server has load at a
# time. Prints each run's output token throughput, TPOT, events per stream and CPU per token,
# then each server's own CPU time for N streams (read by curl) with its engine idle.
# Usage: scripts/bench_dashboard_load.sh [MODEL] [N=200] [R=3] [PROMPTS=32] [OUTPUT_LEN=256]
# (default MODEL: the 110m preset with random Q8_0 weights, written to /tmp by make-model)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/tools/kvserve
model=${1:-/tmp/kvserve_bench_110m_preset_q8_0.gguf}
clients=${2:-200}
rounds=${3:-3}
prompts=${4:-32}
output_len=${5:-256}
[ -f "$model" ] || "$bin" make-model --preset 110m --type q8_0 -o "$model" > /dev/null
logs=() pids=() urls=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -f "${logs[@]}"
}
trap cleanup EXIT
start_server() {  # extra serve flags; sets url
  local log
  log=$(mktemp)
  logs+=("$log")
  "$bin" serve "$model" --port 0 "$@" > "$log" 2>&1 &
  pids+=($!)
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1 || true)
    [ -n "$url" ] && curl -sf "$url/health" > /dev/null && break
    sleep 0.1
  done
  urls+=("$url")
  echo "server $url ${*:-(defaults)}: $(grep -o 'KV cache: [0-9]* tokens' "$log")"
}
start_server
start_server --dashboard-events-per-s 0
echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
load=(--concurrency 8 --input-len 32 --output-len "$output_len")
for u in "${urls[@]}"; do  # warm-up
  "$bin" bench serve --base-url "$u" "${load[@]}" --num-prompts 8 > /dev/null 2>&1
done
load+=(--num-prompts "$prompts")
names=("0 dashboards" "$clients dashboards" "$clients dashboards, unbounded")
servers=(0 0 1)
streams=(0 "$clients" "$clients")
# CPU per output token besides throughput: on a shared machine the wall-clock speed follows the
# other users' load, the CPU time that the server and the benchmark (with its dashboard
# readers) spend per generated token much less.
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cpu_time=$(mktemp)
logs+=("$cpu_time")
for i in $(seq "$rounds"); do
  order=(0 1 2)
  (( i % 2 == 0 )) && order=(2 1 0)
  for k in "${order[@]}"; do
    server=${pids[${servers[$k]}]}
    t0=$(ticks "$server")
    out=$(/usr/bin/time -f "%U %S" -o "$cpu_time" "$bin" bench serve \
      --base-url "${urls[${servers[$k]}]}" "${load[@]}" --dashboard-clients "${streams[$k]}" 2>/dev/null)
    t1=$(ticks "$server")
    tput=$(grep 'Output token throughput' <<< "$out" | awk '{print $NF}')
    tpot=$(grep '^TPOT' <<< "$out" | awk '{print $4}')
    tokens=$(grep 'Total generated tokens' <<< "$out" | awk '{print $NF}')
    events=$(grep -o '[0-9.]* events/s each' <<< "$out" || echo "-")
    cpu_ms=$(awk -v s=$((t1 - t0)) -v hz="$hz" '{printf "%.0f", s * 1000 / hz + ($1 + $2) * 1000}' "$cpu_time")
    echo "round $i, ${names[$k]}: output $tput tok/s, TPOT mean $tpot ms, $events," \
      "CPU $(awk -v c="$cpu_ms" -v n="$tokens" 'BEGIN {printf "%.2f", c / n}') ms/token" \
      "(server + benchmark), load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
# Each server's own CPU for N streams with its engine idle (snapshots, encoding, writes): clock
# ticks of the process over 10 s with N streams read by curl.
for s in 0 1; do
  readers=()
  for _ in $(seq "$clients"); do curl -sN "${urls[$s]}/v1/kv/events" > /dev/null & readers+=($!); done
  sleep 2; c=$(ticks "${pids[$s]}"); sleep 10; d=$(ticks "${pids[$s]}")
  kill "${readers[@]}" 2>/dev/null || true
  wait "${readers[@]}" 2>/dev/null || true
  echo "server CPU with the engine idle and $clients streams, ${names[$((s + 1))]}:" \
    "$(( (d - c) * 1000 / hz / 10 )) ms/s"
done
