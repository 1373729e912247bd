// Runs the official openai npm client (tests/server/openai_client/, installed by
// scripts/test.sh with `npm install`) against the real server: chat and completions,
// streaming and not, logprobs, stop, errors. Skips when node or the package is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "server_process.h"

namespace kvserve::server::testing {
namespace {

TEST(OpenAiClientTest, OfficialNodeClientPasses) {
  const std::string model = TestModelPath();
  if (model.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/server/openai_client";
  if (!std::filesystem::exists(dir + "/node_modules/openai/package.json")) {
    GTEST_SKIP() << "the openai npm package is not installed: run `npm install` in " << dir
                 << " (scripts/test.sh does)";
  }
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--served-model-name", "stories", "--api-key", "k3y"}, 60))
      << server.error();
  const std::string command = "cd '" + dir + "' && KVSERVE_BASE_URL=http://127.0.0.1:" +
                              std::to_string(server.port()) +
                              "/v1 KVSERVE_MODEL=stories KVSERVE_API_KEY=k3y "
                              "timeout 60 node --test 2>&1";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "node --test failed";
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

}  // namespace
}  // namespace kvserve::server::testing
