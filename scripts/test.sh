#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test: once in a release
# build, once under AddressSanitizer + UndefinedBehaviorSanitizer; then every libFuzzer target
# for a short fixed budget (fuzz/run.sh, docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
scripts/build.sh release
(cd tests/server/openai_client && npm install --no-audit --no-fund --silent) || echo "warning: npm install failed; the openai client test will be skipped"
(cd tests/server/dashboard_browser && npm install --no-audit --no-fund --silent) || echo "warning: npm install failed; the dashboard browser test will be skipped"
# llama.cpp, the anchor of the compat suite and `kvserve bench compare` (tests/compat/node).
(cd tests/compat/node && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --silent) || echo "warning: npm ci failed; the compat tests will be skipped"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 900)
scripts/build.sh asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j "$jobs" --timeout 1800 -LE no_asan)
scripts/build.sh fuzz
fuzz/run.sh
