#!/usr/bin/env bash
# README command 1: installs what is missing, builds, makes the built-in demo model (random
# weights, nothing downloaded) and starts the OpenAI-compatible server on it (Ctrl-C stops it).
# KVSERVE_DEMO=generate runs one `kvserve generate` instead of the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
mkdir -p models
[ -f models/demo-tiny.gguf ] || build/tools/kvserve make-model --preset tiny --type f32 -o models/demo-tiny.gguf
if [ "${KVSERVE_DEMO:-serve}" = generate ]; then
  exec build/tools/kvserve generate models/demo-tiny.gguf --prompt "Once upon a time" -n 32 --seed 1
fi
port=${PORT:-8000}
cat <<MSG
kvserve: starting the server on the demo model at http://127.0.0.1:$port. From another shell:
  curl http://127.0.0.1:$port/v1/completions -H 'Content-Type: application/json' \\
    -d '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}'
MSG
exec build/tools/kvserve serve models/demo-tiny.gguf --served-model-name demo --port "$port"
