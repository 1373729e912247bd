// `kvserve bench compare` end to end on a tiny model (one short round; the numbers are not
// checked, only that both sides ran and the table holds a ratio): catches a change in
// `bench throughput`'s output or in bench.mjs that would break the side-by-side benchmark.
#include <gtest/gtest.h>

#include <regex>

#include "compat/anchor.h"

namespace kvserve::compat {
namespace {

TEST(BenchCompareTest, PrintsBothSidesAndTheirRatio) {
  if (std::optional<std::string> why = AnchorUnavailableReason()) GTEST_SKIP() << *why;
  TempDir dir;
  const std::string model = dir.path() + "/tiny.gguf";
  ASSERT_TRUE(RunKvserve("make-model --preset tiny --type q8_0 -o " + model, dir.path()).ok());
  Result<std::string> out =
      RunKvserve("bench compare " + model +
                     " --threads 1 --rounds 1 --rows prefill-512,decode-0,batch-16 "
                     "--decode-tokens 4",
                 dir.path());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NE(out->find("kvserve SIMD target: "), std::string::npos) << *out;
  EXPECT_NE(out->find("memory read bandwidth"), std::string::npos) << *out;
  EXPECT_NE(out->find("decode roof: "), std::string::npos) << *out;
  for (const char* row : {"prefill-512", "decode-0", "batch-16"}) {
    // | row | kvserve rounds | llama.cpp rounds | median | median | ratio | own | ratio | roof |
    const std::regex line(std::string(R"(\| )") + row +
                          R"( \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| )"
                          R"([0-9.]+ \| [0-9.]+x \|)");
    EXPECT_TRUE(std::regex_search(*out, line)) << row << " missing in:\n" << *out;
  }
  // Both decode rows against their roofs, and the aggregate over the single stream beside the
  // byte ceiling (a dense model: 16 sequences read the weights once, so the ceiling is > 1).
  for (const char* row : {"decode-0", "batch-16"}) {
    const std::regex roof(std::string(R"(\| )") + row + R"( \|.*\| [0-9]+% of [0-9]+ \|)");
    EXPECT_TRUE(std::regex_search(*out, roof)) << row << " has no roof share in:\n" << *out;
  }
  std::smatch m;
  const std::regex over(R"(kvserve batch-16 over its decode-0: ([0-9.]+)x \(at equal shares of )"
                        R"(the bandwidth: ([0-9.]+)x\))");
  ASSERT_TRUE(std::regex_search(*out, m, over)) << *out;
  EXPECT_GT(std::stod(m[2].str()), 1.0) << *out;
  Result<std::string> bad = RunKvserve("bench compare " + model + " --rows nope", dir.path());
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace kvserve::compat
