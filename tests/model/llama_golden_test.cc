// Golden test: the trained TinyStories 260K model (llama arch, F32) against the independent
// float64 reference (reference_dense.cc), greedy, 64 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/dense.h"
#include "reference_dense.h"
#include "support/kv_arena.h"

namespace kvserve::model {
namespace {

const char* const kModelPath = KVSERVE_SHARED_DIR "/models/stories260K.gguf";

// "Once upon a time" with BOS, derived by hand with SentencePiece BPE over the vocab of the GGUF
// (dummy-prefix space, then highest-score merges): <s> ▁Once ▁upon ▁a ▁time.
// (src/tokenizer/ did not exist yet when this test was written.)
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

std::string Decode(const std::vector<std::string>& pieces, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) {
    std::string piece = pieces[id];
    if (piece == "<s>" || piece == "</s>") continue;
    if (piece == "<0x0A>") piece.assign(1, '\n');  // (operator= trips a GCC 12 -Wrestrict)
    const std::string_view space = "\xE2\x96\x81";  // U+2581
    for (size_t i = 0; i < piece.size();) {
      if (std::string_view(piece).substr(i, space.size()) == space) {
        text += ' ';
        i += space.size();
      } else {
        text += piece[i++];
      }
    }
  }
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(got[i] - want[i]));
    max_ref = std::max(max_ref, std::abs(want[i]));
  }
  return max_diff / max_ref;
}

TEST(LlamaGoldenTest, Stories260KGreedyMatchesFloat64Reference) {
  if (!std::filesystem::exists(kModelPath)) GTEST_SKIP() << "missing " << kModelPath;
  auto opened = gguf::GgufFile::Open(kModelPath);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<const gguf::GgufFile> file = std::move(opened).value();
  LoadOptions options;
  options.max_batch_tokens = 16;
  options.max_threads = 2;
  auto loaded = DenseModel::Load(file, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  DenseModel& model = **loaded;
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_FALSE(c.tied_output);
  auto ref = model_test::ReferenceDense::Create(*file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto pieces = file->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(pieces.ok());

  testing::SimpleKvArena arena(5, static_cast<int>(c.num_kv_heads),
                               static_cast<int>(c.head_dim), tensor::DType::kF32, 16, 8);
  const std::vector<int32_t> table_ids = testing::ContiguousBlockTable(0, 8);
  const std::span<const int32_t> table[] = {table_ids};
  ThreadPool pool(2);
  std::vector<float> logits(c.vocab_size);
  std::vector<double> ref_logits;
  for (int32_t t : kPrompt) ref_logits = (*ref)->Step(t);
  Batch batch;
  batch.sequences = {{kPrompt, 0, table, true}};
  model.Forward(batch, arena.views(), pool, logits.data());

  std::vector<int32_t> ids = kPrompt;
  for (int step = 0; step < 64; ++step) {
    ASSERT_LE(RelativeError(logits, ref_logits), 1e-4) << "step " << step;
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    const auto ref_best =
        std::max_element(ref_logits.begin(), ref_logits.end()) - ref_logits.begin();
    ASSERT_EQ(best, ref_best) << "step " << step;
    const int32_t next = static_cast<int32_t>(best);
    ids.push_back(next);
    const int32_t pos = static_cast<int32_t>(ids.size()) - 1;
    batch.sequences = {{std::span<const int32_t>(&ids.back(), 1), pos, table, true}};
    model.Forward(batch, arena.views(), pool, logits.data());
    ref_logits = (*ref)->Step(next);
  }
  const std::string text = Decode(*pieces, ids);
  EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily. She loved to play "
                       "outside in the park.",
                       0),
            0u)
      << text;
}

}  // namespace
}  // namespace kvserve::model
