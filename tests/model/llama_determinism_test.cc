// DESIGN.md section 5: a sequence's logits are bit-identical alone or batched with others,
// however its prompt is chunked, for 1 or 2 threads, for every KV storage dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/dense.h"
#include "model/dense_random.h"
#include "support/kv_arena.h"

namespace kvserve::model {
namespace {

using Logits = std::vector<std::vector<float>>;  // (steps with logits, vocab)

// One sequence of a run: its prompt, fed in chunks of sizes chunks[0], chunks[1], ... (cycled),
// then num_decode greedy tokens, in the blocks of block_table.
struct SeqPlan {
  std::vector<int32_t> prompt;
  std::vector<int> chunks;
  std::vector<int32_t> block_table;
  int num_decode = 8;
};

struct SeqState {
  size_t consumed = 0;
  size_t chunk_index = 0;
  std::vector<int32_t> generated;
  Logits logits;
};

// Runs every plan together, one Forward per step; returns each plan's logits rows (after its
// whole prompt, then after each decoded token).
std::vector<Logits> RunPlans(DenseModel& model, const std::vector<SeqPlan>& plans,
                             tensor::DType kv_dtype, int num_threads) {
  const ModelConfig& c = model.config();
  int32_t num_blocks = 0;
  for (const SeqPlan& p : plans) {
    num_blocks =
        std::max(num_blocks, *std::max_element(p.block_table.begin(), p.block_table.end()) + 1);
  }
  testing::SimpleKvArena arena(static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                               static_cast<int>(c.head_dim), kv_dtype,
                      4, num_blocks);
  ThreadPool pool(num_threads);
  std::vector<std::span<const int32_t>> tables;  // (plans): one KV group each
  for (const SeqPlan& p : plans) tables.emplace_back(p.block_table);
  std::vector<SeqState> states(plans.size());
  std::vector<float> logits;
  for (;;) {
    Batch batch;
    std::vector<size_t> owners;  // plan index of each sequence of the batch
    for (size_t i = 0; i < plans.size(); ++i) {
      const SeqPlan& p = plans[i];
      SeqState& s = states[i];
      if (s.logits.size() == static_cast<size_t>(p.num_decode) + 1) continue;
      SequenceInput in;
      in.block_tables = std::span<const std::span<const int32_t>>(tables).subspan(i, 1);
      if (s.consumed < p.prompt.size()) {
        const size_t chunk = std::min<size_t>(p.chunks[s.chunk_index++ % p.chunks.size()],
                                              p.prompt.size() - s.consumed);
        in.tokens = std::span<const int32_t>(p.prompt).subspan(s.consumed, chunk);
        in.start_pos = static_cast<int32_t>(s.consumed);
        s.consumed += chunk;
        in.num_logits = s.consumed == p.prompt.size() ? 1 : 0;
      } else {
        in.tokens = std::span<const int32_t>(&s.generated.back(), 1);
        in.start_pos = static_cast<int32_t>(p.prompt.size() + s.generated.size() - 1);
        in.num_logits = 1;
      }
      if (in.num_logits > 0) owners.push_back(i);
      batch.sequences.push_back(in);
    }
    if (batch.sequences.empty()) break;
    logits.assign(owners.size() * c.vocab_size, 0.0f);
    model.Forward(batch, arena.views(), pool, logits.data());
    for (size_t r = 0; r < owners.size(); ++r) {
      const float* row = logits.data() + r * c.vocab_size;
      SeqState& s = states[owners[r]];
      s.logits.emplace_back(row, row + c.vocab_size);
      s.generated.push_back(static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row));
    }
  }
  std::vector<Logits> out;
  for (SeqState& s : states) out.push_back(std::move(s.logits));
  return out;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& v : t) v = static_cast<int32_t>(rng() % vocab);
  return t;
}

bool BitIdentical(const Logits& a, const Logits& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

class DeterminismTest : public ::testing::TestWithParam<std::tuple<tensor::DType, tensor::DType>> {
};

TEST_P(DeterminismTest, LogitsIndependentOfBatchChunkingAndThreads) {
  const auto [weight_dtype, kv_dtype] = GetParam();
  DenseSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;  // GQA, kv row 2 * 16 = 32 values: one block of every dtype
  RandomWeights weights;
  weights.matrix_type = weight_dtype;
  weights.norm_spread = 0.1f;
  auto file = gguf::GgufFile::FromBuffer(DenseRandomWriter(spec, weights)->Serialize());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  LoadOptions options;
  options.max_batch_tokens = 96;
  options.max_threads = 2;
  auto loaded = DenseModel::Load(std::move(file).value(), options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  DenseModel& model = **loaded;
  const int vocab = static_cast<int>(model.config().vocab_size);

  // Block size 4: 48 positions need 12 blocks. Alone: blocks 0..11; batched: scattered.
  SeqPlan target{RandomTokens(40, vocab, 7), {40}, testing::ContiguousBlockTable(0, 12), 8};
  const std::vector<Logits> alone = RunPlans(model, {target}, kv_dtype, 2);
  ASSERT_EQ(alone[0].size(), 9u);

  const std::vector<Logits> alone_one_thread = RunPlans(model, {target}, kv_dtype, 1);
  EXPECT_TRUE(BitIdentical(alone[0], alone_one_thread[0])) << "1 vs 2 threads";

  SeqPlan chunked = target;
  chunked.chunks = {1, 7, 16};
  EXPECT_TRUE(BitIdentical(alone[0], RunPlans(model, {chunked}, kv_dtype, 2)[0])) << "chunked";

  SeqPlan batched = target;
  batched.chunks = {16, 7};
  batched.block_table = {30, 2, 17, 9, 25, 4, 12, 21, 0, 33, 14, 27};
  SeqPlan a{RandomTokens(13, vocab, 11), {13}, {1, 3, 5, 6, 31}, 6};
  SeqPlan b{RandomTokens(29, vocab, 12), {5}, {7, 8, 10, 11, 13, 15, 16, 18, 19, 20}, 10};
  SeqPlan d{RandomTokens(5, vocab, 13), {2}, {22, 23, 24, 26, 28, 29}, 12};
  const std::vector<Logits> mixed = RunPlans(model, {a, batched, b, d}, kv_dtype, 2);
  EXPECT_TRUE(BitIdentical(alone[0], mixed[1])) << "batched with 3 others";
  const std::vector<Logits> mixed_one_thread = RunPlans(model, {a, batched, b, d}, kv_dtype, 1);
  EXPECT_TRUE(BitIdentical(alone[0], mixed_one_thread[1])) << "batched, 1 thread";
  // The other sequences also match their own solo runs.
  EXPECT_TRUE(BitIdentical(mixed[2], RunPlans(model, {b}, kv_dtype, 2)[0]));
}

INSTANTIATE_TEST_SUITE_P(
    KvDTypes, DeterminismTest,
    ::testing::Combine(::testing::Values(tensor::DType::kF32, tensor::DType::kQ8_0),
                       ::testing::Values(tensor::DType::kF32, tensor::DType::kF16,
                                         tensor::DType::kBF16, tensor::DType::kQ8_0,
                                         tensor::DType::kFP8_E4M3_E8M0_32,
                                         tensor::DType::kFP4_E2M1_E4M3_16)),
    [](const auto& info) {
      return std::string(tensor::DTypeName(std::get<0>(info.param))) + "_weights_" +
             std::string(tensor::DTypeName(std::get<1>(info.param))) + "_kv";
    });

}  // namespace
}  // namespace kvserve::model
