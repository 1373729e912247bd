// Tests on the real vocabularies in /work/shared: the stories260K SPM vocab against llama2.c,
// round trips, streaming over real text, and speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "gguf/gguf.h"
#include "test_data.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

using testing::SharedFileExists;
using testing::SharedPath;

Result<Tokenizer> Load(const std::string& relative) {
  KV_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(SharedPath(relative)));
  return Tokenizer::FromGguf(*file);
}

#define SKIP_WITHOUT(relative) \
  if (!SharedFileExists(relative)) GTEST_SKIP() << "shared test data absent: " << (relative)

TEST(Stories260KTest, MatchesLlama2c) {
  SKIP_WITHOUT("models/stories260K.gguf");
  auto tok = Load("models/stories260K.gguf");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // From llama2.c's encode() over tok512.bin (BOS, dummy prefix, best-score merges).
  EXPECT_EQ(tok->Encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  const std::string story = "Once upon a time, there was a little girl named Lily.";
  const std::vector<int32_t> ids = tok->Encode(story);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                       421, 395, 317, 426}));
  EXPECT_EQ(tok->Decode(ids), story);
  EXPECT_EQ(tok->Encode("Hello world"), (std::vector<int32_t>{1, 346, 306, 414, 263, 304, 341}));
  EXPECT_EQ(tok->vocab().bos_id(), 1);
  EXPECT_EQ(tok->vocab().eos_id(), 2);
  EXPECT_TRUE(tok->vocab().add_bos());
  EXPECT_FALSE(tok->vocab().add_eos());
}

// decode(encode(s)) == s for every test string of vocabs whose decoding is lossless
// (SPM strips only the prefix space it added; DeepSeek does no space clean-up).
TEST(RoundTripTest, TestStringsSurviveEncodeDecode) {
  for (const char* name : {"ggml-vocab-llama-spm", "ggml-vocab-deepseek-llm",
                           "ggml-vocab-deepseek-coder", "ggml-vocab-gpt-2"}) {
    const std::string relative = std::string("tokenizers/") + name + ".gguf";
    SKIP_WITHOUT(relative);
    auto tok = Load(relative);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const bool gpt2 = std::string(name) == "ggml-vocab-gpt-2";
    int num_checked = 0;
    for (const testing::VocabVector& v : testing::ReadVocabVectors(SharedPath(relative))) {
      const std::vector<int32_t> ids = tok->Encode(v.text);
      // GPT-2 cleans " ," and " 's" on decode, so compare without clean-up there.
      EXPECT_EQ(tok->Decode(ids, {.clean_spaces = !gpt2}), v.text) << name;
      StreamDecoder dec(*tok, {.strip_leading_space = true});
      std::string streamed;
      for (const int32_t id : ids) streamed += dec.Push(id);
      streamed += dec.Flush();
      EXPECT_EQ(streamed, v.text) << name;
      ++num_checked;
    }
    EXPECT_EQ(num_checked, 46) << name;
  }
}

TEST(SpecialTokensTest, RealVocabs) {
  SKIP_WITHOUT("tokenizers/ggml-vocab-starcoder.gguf");
  auto tok = Load("tokenizers/ggml-vocab-starcoder.gguf");
  ASSERT_TRUE(tok.ok());
  const std::string text = "<fim_prefix>def f():<fim_suffix>";
  const std::vector<int32_t> parsed = tok->Encode(text, {.parse_special = true});
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);  // <fim_prefix>
  EXPECT_EQ(parsed.back(), 3);   // <fim_suffix>
  const std::vector<int32_t> plain = tok->Encode(text, {.parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok->Decode(plain), text);
  EXPECT_EQ(tok->Decode(parsed), "def f():");
  EXPECT_EQ(tok->Decode(parsed, {.render_special = true}), text);
  EXPECT_TRUE(tok->vocab().IsEog(0));  // <|endoftext|>
}

TEST(PerformanceTest, EncodeTenKilobytesAndLoadLargeVocab) {
  SKIP_WITHOUT("tokenizers/ggml-vocab-deepseek-llm.gguf");
  auto file = gguf::GgufFile::Open(SharedPath("tokenizers/ggml-vocab-deepseek-llm.gguf"));
  ASSERT_TRUE(file.ok());
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  auto tok = Tokenizer::FromGguf(**file);
  const std::clock_t c1 = std::clock();
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(tok.ok());
  VocabConfig config_copy = tok->vocab().config();
  const std::clock_t c2 = std::clock();
  ASSERT_TRUE(Vocab::FromConfig(std::move(config_copy)).ok());
  const double load_cpu_ms = 1000.0 * (c1 - c0) / CLOCKS_PER_SEC;
  std::printf("[ perf     ] vocab load cpu %.1f ms, of which building tables %.1f ms\n",
              load_cpu_ms, 1000.0 * (std::clock() - c2) / CLOCKS_PER_SEC);
  std::string text;
  const std::string paragraph =
      "The quick brown fox jumps over the lazy dog, 1234567 times! \xC3\xA9t\xC3\xA9 "
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C  \n\tcode(x) == y; ";
  while (text.size() < 10 * 1024) text += paragraph;
  const auto t_encode = std::chrono::steady_clock::now();
  const std::clock_t c_encode = std::clock();
  const std::vector<int32_t> ids = tok->Encode(text);
  const double encode_cpu_ms = 1000.0 * (std::clock() - c_encode) / CLOCKS_PER_SEC;
  const auto t2 = std::chrono::steady_clock::now();
  const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double encode_ms = std::chrono::duration<double, std::milli>(t2 - t_encode).count();
  std::printf(
      "[ perf     ] deepseek-llm (%d tokens): vocab build %.1f ms wall; encode %zu bytes "
      "-> %zu ids in %.2f ms wall, %.2f ms cpu\n",
      tok->vocab().num_tokens(), load_ms, text.size(), ids.size(), encode_ms, encode_cpu_ms);
  EXPECT_EQ(tok->Decode(ids), text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  // CPU time, not wall time: CI machines are shared. Budgets: 10 KB in well under 50 ms; a
  // 150K-token vocab in ~200 ms (this one has 102K).
  EXPECT_LT(encode_cpu_ms, 50.0);
  EXPECT_LT(load_cpu_ms, 200.0);
#endif
}

}  // namespace
}  // namespace kvserve::tokenizer
