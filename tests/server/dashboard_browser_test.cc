// The live KV dashboard in Debian's headless Chromium and Firefox (tests/server/dashboard_browser/,
// run with node; puppeteer-core installed by scripts/test.sh) against the real server with a CPU
// and a file tier and an API key, while `kvserve bench serve --dashboard` drives load that
// preempts and hits the tiers. Screenshots land in build/dashboard-screenshots/
// (scripts/dashboard_screenshots.sh copies them to docs/). Skips, saying why, when both
// browsers, node, the npm package or ../shared are missing (node skips a missing browser).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "server_process.h"

namespace kvserve::server::testing {
namespace {

TEST(DashboardBrowserTest, LivePageMatchesStateAndMetricsUnderLoad) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the browser test runs in the release build (the dashboard's server code runs "
                  "under the sanitizers in kv_dashboard_test and the server tests)";
#endif
  const std::string model = TestModelPath();
  if (model.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
  if (!std::filesystem::exists("/usr/bin/chromium") && !std::filesystem::exists("/usr/bin/firefox")) {
    GTEST_SKIP() << "neither /usr/bin/chromium nor /usr/bin/firefox is installed (scripts/setup.sh "
                    "installs Debian's chromium and firefox-esr)";
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/server/dashboard_browser";
  if (!std::filesystem::exists(dir + "/node_modules/puppeteer-core/package.json")) {
    GTEST_SKIP() << "the puppeteer-core npm package is not installed: run `npm install` in " << dir
                 << " (scripts/test.sh does)";
  }
  const std::filesystem::path files =
      std::filesystem::temp_directory_path() / ("kvserve_dashboard_" + std::to_string(getpid()));
  std::filesystem::remove_all(files);
  // 1 MiB of f32 stories260K KV = 50 blocks of 16 tokens: 8 requests at once (no arrival rate)
  // of up to 224 tokens need 8 x 14 minus the shared prefix's 3, so they preempt whatever the
  // machine's speed; evicted blocks go to a 10-block CPU tier and cascade to files.
  const std::string tiers =
      R"({"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {)"
      R"("spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 204800, )"
      R"("secondary_tiers": [{"type": "fs", "root_dir": ")" + files.string() + R"("}]}})";
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--served-model-name", "stories", "--api-key", "dash-k3y",
                                   "--kv-cache-memory-bytes", "1MiB", "--max-model-len", "512",
                                   "--kv-transfer-config", tiers},
                           60))
      << server.error();
  const std::string shots = std::string(KVSERVE_BINARY_DIR) + "/dashboard-screenshots";
  const std::string command =
      "cd '" + dir + "' && KVSERVE_BASE_URL=http://127.0.0.1:" + std::to_string(server.port()) +
      " KVSERVE_API_KEY=dash-k3y KVSERVE_BINARY='" + KVSERVE_BINARY_DIR +
      "/tools/kvserve' KVSERVE_SCREENSHOT_DIR='" + shots +
      "' KVSERVE_BENCH_ARGS='--num-prompts 32 --concurrency 8 --input-len 96 --output-len 128 "
      "--shared-prefix-len 48' timeout 420 node --test --test-concurrency=1 2>&1";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "node --test failed";
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
  std::filesystem::remove_all(files);
}

}  // namespace
}  // namespace kvserve::server::testing
