#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/ from the browser test (a real server under
# `kvserve bench serve` load, in headless Chromium and Firefox): dashboard.png (Chromium,
# 1280x800, the README's), dashboard-phone.png (Chromium, 390 px wide) and
# dashboard-firefox.png (Firefox, 1280x800).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
(cd tests/server/dashboard_browser && npm install --no-audit --no-fund --silent)
shots=build/dashboard-screenshots
rm -rf "$shots"
(cd build && ctest --output-on-failure -R DashboardBrowserTest)
for f in chromium-1280x800 chromium-phone firefox-1280x800; do
  test -f "$shots/dashboard-$f.png" || { echo "no $shots/dashboard-$f.png: was a browser skipped?" >&2; exit 1; }
done
cp "$shots/dashboard-chromium-1280x800.png" docs/dashboard.png
cp "$shots/dashboard-chromium-phone.png" docs/dashboard-phone.png
cp "$shots/dashboard-firefox-1280x800.png" docs/dashboard-firefox.png
echo "updated docs/dashboard.png, docs/dashboard-phone.png and docs/dashboard-firefox.png"
