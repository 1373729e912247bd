#!/usr/bin/env bash
# Installs what kvserve needs from Debian 12's packages (nothing else is downloaded).
# Safe to run again: it only calls apt-get when a package is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev nlohmann-json3-dev libboost-dev libcpp-httplib-dev libcli11-dev libfmt-dev
  libxxhash-dev libhiredis-dev redis-server curl libicu-dev
  clang libclang-rt-dev  # libFuzzer targets (fuzz/)
)
# The openai npm client test (tests/server/openai_client) needs node and npm; the dashboard's
# browser test (tests/server/dashboard_browser) needs Debian's chromium and firefox-esr too.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
packages+=(chromium firefox-esr)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
