#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/ (dashboard.png at 1280x800, dashboard-phone.png)
# from the browser test: a real server under `kvserve bench serve` load, in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
(cd tests/server/dashboard_browser && npm install --no-audit --no-fund --silent)
rm -rf build/dashboard-screenshots
(cd build && ctest --output-on-failure -R DashboardBrowserTest)
test -f build/dashboard-screenshots/dashboard-1280x800.png || { echo "no screenshot: was the test skipped?" >&2; exit 1; }
cp build/dashboard-screenshots/dashboard-1280x800.png docs/dashboard.png
cp build/dashboard-screenshots/dashboard-phone.png docs/dashboard-phone.png
echo "updated docs/dashboard.png and docs/dashboard-phone.png"
