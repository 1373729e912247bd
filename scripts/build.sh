#!/usr/bin/env bash
# Configures and builds kvserve. Usage: scripts/build.sh [release|asan|fuzz] (default release).
# release -> build/, asan (ASan+UBSan, Debug-optimised) -> build-asan/, fuzz (clang libFuzzer
# targets with ASan+UBSan, fuzz/) -> build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-release}
case "$mode" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=ON -DKVSERVE_BUILD_BENCH=OFF) ;;
  fuzz) dir=build-fuzz; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_FUZZ=ON
                               -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "usage: $0 [release|asan|fuzz]" >&2; exit 2 ;;
esac
# ccache, when the machine has it, makes rebuilds across checkouts cheap (not required).
command -v ccache >/dev/null 2>&1 && flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" -G Ninja "${flags[@]}" > /dev/null
cmake --build "$dir" -j "$(nproc)"
