#!/usr/bin/env bash
# README command 1: installs what is missing, builds, makes the built-in demo model (random
# weights, nothing downloaded) and runs kvserve on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
mkdir -p models
[ -f models/demo-tiny.gguf ] || build/kvserve make-model --preset tiny --type f32 -o models/demo-tiny.gguf
build/kvserve generate models/demo-tiny.gguf --prompt "Once upon a time" -n 32 --seed 1
