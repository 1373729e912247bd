// Every dense-attention architecture (the mixtures of experts included) against the
// independent float64 reference (reference_dense.cc): the make-model `tiny` preset of each (F32
// weights) runs a 40-token prompt (longer than the sliding windows) in chunks of 7 through a
// scattered block table, then 32 greedy tokens. The tokens must be the reference's and every step's
// log-probabilities within 1e-4 of its own. The presets must also give outputs that vary (the top-1
// probability is not ~1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/dense.h"
#include "model/dense_random.h"
#include "reference_dense.h"
#include "support/gguf_buffer.h"
#include "support/kv_arena.h"

namespace kvserve::model {
namespace {

struct Case {
  std::string name;
  std::string arch;
  std::string preset;
  int32_t max_context = 0;  // 0: the model's context length
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<double> LogSoftmax(const std::vector<double>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - mx - std::log(sum);
  return out;
}

// max |a - b| over the tokens the reference gives a logprob above -30.
double MaxLogprobDiff(const std::vector<float>& logits, const std::vector<double>& want) {
  const std::vector<double> a = LogSoftmax(std::vector<double>(logits.begin(), logits.end()));
  const std::vector<double> b = LogSoftmax(want);
  double diff = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] > -30) diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return diff;
}

int NumKvGroups(const ModelConfig& c) {
  return static_cast<int>(std::set<int32_t>(c.layer_window.begin(), c.layer_window.end()).size());
}

class ArchitectureTest : public ::testing::TestWithParam<Case> {};

TEST_P(ArchitectureTest, GreedyTokensAndLogprobsMatchFloat64Reference) {
  const Case& c = GetParam();
  Result<const Architecture*> arch = FindArchitecture(c.arch);
  ASSERT_TRUE(arch.ok()) << arch.status().ToString();
  Result<gguf::GgufWriter> writer = (*arch)->write_random(c.preset, RandomWeights{});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(*writer);
  LoadOptions options;
  options.max_batch_tokens = 8;
  options.max_threads = 2;
  if (c.max_context > 0) options.max_context_tokens = c.max_context;
  auto model = DenseModel::Load(file, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ref = model_test::ReferenceDense::Create(*file, c.max_context);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const ModelConfig& config = (*model)->config();
  ASSERT_EQ(config.architecture, c.arch);
  const int num_groups = NumKvGroups(config);
  testing::SimpleKvArena arena(static_cast<int>(config.num_layers),
                               static_cast<int>(config.num_kv_heads), static_cast<int>(config.head_dim),
                               tensor::DType::kF32, 16, 8,
                               num_groups);
  const std::vector<int32_t> table_ids = {5, 2, 7, 0, 3, 1, 6, 4};  // 128 tokens
  const std::vector<std::span<const int32_t>> tables(num_groups, table_ids);
  ThreadPool pool(2);

  constexpr int kPrompt = 40, kChunk = 7, kGenerated = 32;
  std::vector<int32_t> ids;
  for (int i = 0; i < kPrompt; ++i) {
    ids.push_back((i * 37 + 11) % static_cast<int>(config.vocab_size));
  }
  std::vector<float> logits(config.vocab_size);
  std::vector<double> want;
  for (int32_t t : ids) want = (*ref)->Step(t);
  for (int start = 0; start < kPrompt; start += kChunk) {
    const int n = std::min(kChunk, kPrompt - start);
    Batch batch;
    batch.sequences = {
        {std::span<const int32_t>(ids).subspan(start, n), start, tables, start + n == kPrompt}};
    (*model)->Forward(batch, arena.views(), pool, logits.data());
  }
  const std::vector<double> first = LogSoftmax(want);
  EXPECT_LT(std::exp(*std::max_element(first.begin(), first.end())), 0.9)
      << "the preset predicts one token with probability ~1";
  for (int step = 0; step < kGenerated; ++step) {
    ASSERT_LE(MaxLogprobDiff(logits, want), 1e-4) << "step " << step;
    const auto got = std::max_element(logits.begin(), logits.end()) - logits.begin();
    const auto expected = std::max_element(want.begin(), want.end()) - want.begin();
    ASSERT_EQ(got, expected) << "step " << step;
    ids.push_back(static_cast<int32_t>(expected));
    Batch batch;
    batch.sequences = {{std::span<const int32_t>(&ids.back(), 1),
                        static_cast<int32_t>(ids.size()) - 1, tables, true}};
    (*model)->Forward(batch, arena.views(), pool, logits.data());
    want = (*ref)->Step(ids.back());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, ArchitectureTest,
    ::testing::Values(Case{"llama", "llama", "tiny"}, Case{"llama3", "llama", "llama3-tiny"},
                      Case{"qwen2", "qwen2", "tiny"}, Case{"qwen3", "qwen3", "tiny"},
                      Case{"phi3_long_factors", "phi3", "tiny"},
                      Case{"phi3_short_factors", "phi3", "tiny", 1024},
                      Case{"gemma2", "gemma2", "tiny"}, Case{"gemma3", "gemma3", "tiny"},
                      Case{"qwen2moe", "qwen2moe", "tiny"}, Case{"qwen3moe", "qwen3moe", "tiny"},
                      Case{"gpt_oss", "gpt-oss", "tiny"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve::model
