// Golden test: every string of llama.cpp's tokenizer test vectors (tests/*.gguf.inp/.out in
// /work/shared/tokenizers) must encode to exactly the reference ids, with the flags
// test-tokenizer-0 uses (add_special = false, parse_special = false).
#include <gtest/gtest.h>

#include <cstdio>

#include "gguf/gguf.h"
#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

using testing::ReadVocabVectors;
using testing::SharedFileExists;
using testing::SharedPath;

std::string IdsToString(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class VocabVectorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectorsTest, EncodesLikeLlamaCpp) {
  const std::string name = GetParam();
  const std::string relative = "tokenizers/" + name + ".gguf";
  if (!SharedFileExists(relative)) GTEST_SKIP() << "shared test data absent: " << relative;
  const std::string path = SharedPath(relative);
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<testing::VocabVector> vectors = ReadVocabVectors(path);
  ASSERT_FALSE(vectors.empty()) << "could not read " << path << ".inp/.out";

  int num_passed = 0;
  for (const testing::VocabVector& v : vectors) {
    const std::vector<int32_t> ids =
        tok->Encode(v.text, EncodeOptions{.add_special = false, .parse_special = false});
    if (ids == v.ids) {
      ++num_passed;
      continue;
    }
    ADD_FAILURE() << name << ": '" << v.text << "'\n  expected " << IdsToString(v.ids)
                  << "\n  got      " << IdsToString(ids);
  }
  std::printf("[ vectors  ] %s: %d/%zu passed\n", name.c_str(), num_passed, vectors.size());
  EXPECT_EQ(num_passed, static_cast<int>(vectors.size()));
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectorsTest,
                         ::testing::Values("ggml-vocab-llama-spm", "ggml-vocab-phi-3",
                                           "ggml-vocab-gpt-2", "ggml-vocab-starcoder",
                                           "ggml-vocab-deepseek-llm", "ggml-vocab-deepseek-coder"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace kvserve::tokenizer
