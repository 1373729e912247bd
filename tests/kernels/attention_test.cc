// PagedAttention against the scalar statement of its numerics contract
// (attention_reference.h), bit for bit: every KV dtype, head dims that are and are not
// multiples of 16 or of a quantization block, GQA/MQA, sliding windows, block sizes 1 to 32,
// ragged batches mixing prefill chunks and decodes, contexts across several 256-position
// partitions, thread counts 1-3 (which change the work items and the decode splits) and
// every SIMD target this machine supports.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention_reference.h"
#include "kernels/cpu/attention_exp.h"
#include "kernels/cpu/kv_dequant.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;
using testing::MakeScatteredBatch;
using testing::RandomFloats;
using testing::SameBits;
using testing::ScatteredBatch;

constexpr DType kKvTypes[] = {DType::kF32,  DType::kF16,
                              DType::kBF16, DType::kQ8_0,
                              DType::kFP8_E4M3_E8M0_32, DType::kFP4_E2M1_E4M3_16};

// A head-major paged cache of one layer with `blocks` blocks (tensor/kv_view.h).
struct Cache {
  Cache(int kv_heads, int head_dim, DType dtype, int block_size, int32_t blocks) {
    view = tensor::MakePagedKvView(1, kv_heads, head_dim, dtype, block_size);
    const size_t block_bytes =
        static_cast<size_t>(tensor::RowBytes(dtype, int64_t{kv_heads} * head_dim)) * block_size;
    bytes.assign(2 * block_bytes * blocks, std::byte{0x7F});  // stale bytes everywhere
    view.layers[0] = {bytes.data(), bytes.data() + block_bytes * blocks, block_bytes};
  }
  tensor::PagedKvView view;
  std::vector<std::byte> bytes;
};

// Sequences with scattered blocks; their earlier positions hold random K/V.
ScatteredBatch MakeBatch(std::mt19937& rng, Cache& cache,
                         std::span<const std::pair<int32_t, int32_t>> spec) {
  const tensor::PagedKvView& kv = cache.view;
  return MakeScatteredBatch(rng, kv.block_size, spec, [&](std::span<const int32_t> table,
                                                          int32_t p) {
    const int32_t block = table[p / kv.block_size];
    StoreKvRow(kv, 0, KvPart::kKey, block, p % kv.block_size,
               RandomFloats(rng, kv.row_elems).data());
    StoreKvRow(kv, 0, KvPart::kValue, block, p % kv.block_size,
               RandomFloats(rng, kv.row_elems).data());
  });
}

// Runs every thread count on every target and compares each output with the reference.
void CheckAgainstReference(std::mt19937& rng, const AttentionShape& shape, DType dtype,
                           int block_size, std::span<const std::pair<int32_t, int32_t>> spec) {
  int32_t max_context = 1;
  int32_t blocks = 0;
  for (auto [start, count] : spec) {
    max_context = std::max(max_context, start + count);
    blocks += (start + count + block_size - 1) / block_size;
  }
  Cache cache(shape.num_kv_heads, shape.head_dim, dtype, block_size, blocks);
  ScatteredBatch batch = MakeBatch(rng, cache, spec);
  const int q_width = shape.num_heads * shape.head_dim;
  const int row_elems = shape.num_kv_heads * shape.head_dim;
  const std::vector<float> q = RandomFloats(rng, batch.rows * q_width);
  const std::vector<float> k = RandomFloats(rng, batch.rows * row_elems);
  const std::vector<float> v = RandomFloats(rng, batch.rows * row_elems);
  {
    ThreadPool pool(1);
    WriteKv(cache.view, 0, batch.seqs, k.data(), v.data(), pool);
  }
  std::vector<float> want(batch.rows * q_width);
  for (const AttentionSequence& seq : batch.seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      const int64_t row = seq.first_row + i;
      for (int h = 0; h < shape.num_heads; ++h) {
        const std::vector<float> out =
            testing::ReferenceAttention(shape, cache.view, 0, seq.block_table, seq.start_pos + i, h,
                                        q.data() + row * q_width + h * shape.head_dim);
        std::copy(out.begin(), out.end(), want.begin() + row * q_width + h * shape.head_dim);
      }
    }
  }
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    hwy::SupportedTargets();
    for (int threads = 1; threads <= 3; ++threads) {
      ThreadPool pool(threads);
      AttentionScratch scratch(shape, max_context, threads);
      std::vector<float> out(batch.rows * q_width, -7.0f);
      PagedAttention(shape, cache.view, 0, batch.seqs, q.data(), out.data(), pool, scratch);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(SameBits(out[i], want[i]))
            << tensor::DTypeName(dtype) << " on " << AttentionTargetName() << ", " << threads
            << " threads, block " << block_size << ", head_dim " << shape.head_dim << ": element "
            << i << " = " << out[i] << ", reference " << want[i];
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::SupportedTargets();
}

AttentionShape RandomShape(std::mt19937& rng) {
  AttentionShape shape;
  shape.num_kv_heads = 1 + static_cast<int>(rng() % 3);
  shape.num_heads = shape.num_kv_heads * (1 + static_cast<int>(rng() % 3));
  static constexpr int kDims[] = {8, 32, 40, 64, 128};
  shape.head_dim = kDims[rng() % 5];
  shape.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  if (rng() % 3 == 0) shape.window = 1 + static_cast<int32_t>(rng() % 300);
  return shape;
}

bool Fits(const AttentionShape& shape, DType dtype) {
  return tensor::IsValidRowLength(dtype, int64_t{shape.num_kv_heads} * shape.head_dim);
}

TEST(PagedAttentionTest, BitIdenticalToReferenceOnEveryTargetAndThreadCount) {
  std::mt19937 rng(1234);
  std::vector<float> sinks;
  for (DType dtype : kKvTypes) {
    for (int trial = 0; trial < 6; ++trial) {
      AttentionShape shape = RandomShape(rng);
      while (!Fits(shape, dtype)) shape = RandomShape(rng);
      if (trial % 2 == 1) {  // gpt-oss's attention sinks, around the scores' scale
        std::normal_distribution<float> normal(0.0f, 2.0f);
        sinks.resize(shape.num_heads);
        for (float& s : sinks) s = normal(rng);
        shape.sinks = sinks.data();
      }
      const int block_size = std::vector<int>{1, 4, 16, 32}[rng() % 4];
      // A decode past two partition boundaries, a prefill chunk (one or two query tiles),
      // a short prompt, a decode.
      const std::vector<std::pair<int32_t, int32_t>> spec = {
          {static_cast<int32_t>(500 + rng() % 100), 1},
          {static_cast<int32_t>(rng() % 300),
           static_cast<int32_t>(trial % 3 == 0 ? 65 + rng() % 20 : 1 + rng() % 40)},
          {0, static_cast<int32_t>(1 + rng() % 20)},
          {static_cast<int32_t>(rng() % 50), 1}};
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " trial " + std::to_string(trial));
      CheckAgainstReference(rng, shape, dtype, block_size, spec);
      if (HasFatalFailure()) return;
    }
  }
}

// A lone long decode is split into partition items (one kv head, few threads): the folded
// result is the reference's, whichever thread count (and so which split) ran it.
TEST(PagedAttentionTest, SplitDecodeMatchesReference) {
  std::mt19937 rng(77);
  AttentionShape shape{.num_heads = 4, .num_kv_heads = 1, .head_dim = 64, .scale = 0.125f,
                       .window = std::nullopt, .softcap = std::nullopt};
  for (DType dtype : {DType::kF16, DType::kQ8_0}) {
    const std::vector<std::pair<int32_t, int32_t>> decode = {{2000, 1}};
    CheckAgainstReference(rng, shape, dtype, 16, decode);
    const std::vector<std::pair<int32_t, int32_t>> two = {{1200, 3}, {700, 1}};
    CheckAgainstReference(rng, shape, dtype, 16, two);
    if (HasFatalFailure()) return;
  }
}

// On AVX-512 a decode row of F16 K/V at 64 or 128 dims runs up to 4 queries of several kv
// heads at once (1, 2 or 4 queries per kv head: 4, 2 or 1 heads per call, and what is left of
// the item's heads): 7 kv heads (calls of 4 and 3), qwen3moe's 8 on 4 x 128, gpt-oss's 16 on
// 4 x 64 with sinks and a window that starts inside a chunk, a windowed group of 2; decodes
// that end mid-chunk, at a chunk's end and past a partition boundary: the reference's bits.
// (The reference has no soft-capping: the model tests cover it.)
TEST(PagedAttentionTest, DecodeRowsOverSeveralKvHeadsAtOnceMatchReference) {
  std::mt19937 rng(53);
  std::vector<float> sinks(16);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& s : sinks) s = normal(rng);
  struct Case {
    int heads, kv_heads, head_dim;
    std::optional<int32_t> window;
    bool sinks;
  };
  const Case cases[] = {{7, 7, 64, std::nullopt, false},
                        {8, 4, 128, std::nullopt, false},
                        {16, 4, 64, 37, true},
                        {4, 2, 64, 130, false},
                        {3, 3, 128, 100, false}};
  std::vector<std::pair<int32_t, int32_t>> decodes = {{15, 1}, {255, 1}, {300, 1}, {0, 1}};
  for (int s = 0; s < 12; ++s) decodes.push_back({static_cast<int32_t>(100 + rng() % 200), 1});
  for (const Case& k : cases) {
    AttentionShape shape{.num_heads = k.heads, .num_kv_heads = k.kv_heads,
                         .head_dim = k.head_dim,
                         .scale = 1.0f / std::sqrt(static_cast<float>(k.head_dim)),
                         .window = k.window, .softcap = std::nullopt,
                         .sinks = k.sinks ? sinks.data() : nullptr};
    SCOPED_TRACE(std::to_string(k.heads) + " on " + std::to_string(k.kv_heads) + " x " +
                 std::to_string(k.head_dim));
    CheckAgainstReference(rng, shape, DType::kF16, 16, decodes);
    CheckAgainstReference(rng, shape, DType::kF16, 32, std::span(decodes).first(3));
    if (HasFatalFailure()) return;
  }
}

// Decodes take several kv heads per work item (attention.h): 16 decodes beside a prompt and a
// long decode (every kv head per item, the long one 2 per item at 2-3 threads) and 2 decodes
// (one head per item at 2-3 threads), GQA with sinks and a sliding window, blocks of 8 and 16:
// the reference's bits.
TEST(PagedAttentionTest, DecodesOverSeveralKvHeadsPerItemMatchReference) {
  std::mt19937 rng(31);
  std::vector<float> sinks(16);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& s : sinks) s = normal(rng);
  AttentionShape shape{.num_heads = 16, .num_kv_heads = 8, .head_dim = 64, .scale = 0.125f,
                       .window = std::nullopt, .softcap = std::nullopt};
  std::vector<std::pair<int32_t, int32_t>> many = {{10, 12}, {1500, 1}};
  for (int s = 0; s < 16; ++s) many.push_back({static_cast<int32_t>(120 + rng() % 300), 1});
  const std::vector<std::pair<int32_t, int32_t>> two = {{290, 1}, {37, 2}};
  for (DType dtype : {DType::kF16, DType::kQ8_0}) {
    CheckAgainstReference(rng, shape, dtype, 16, many);
    shape.window = 130;
    shape.sinks = sinks.data();
    CheckAgainstReference(rng, shape, dtype, 8, two);
    shape.window = std::nullopt;
    shape.sinks = nullptr;
    if (HasFatalFailure()) return;
  }
}

// With one visible key the output is that key's V exactly (weight exp(0) = 1), so attention
// must return every stored V as tensor::DequantizeRow reads it: here raw bytes, all codes of
// each format (FP8 and F16 NaN, subnormal and extreme scales included), every target.
TEST(PagedAttentionTest, ReadsEveryStoredCodeAsTheReferenceConverter) {
  std::mt19937 rng(5);
  for (DType dtype : kKvTypes) {
    const int hd = 64;
    const AttentionShape shape{.num_heads = 1, .num_kv_heads = 1, .head_dim = hd, .scale = 1.0f,
                               .window = 1, .softcap = std::nullopt};
    const int32_t positions = 2048;
    Cache cache(1, hd, dtype, 16, positions / 16);
    std::vector<int32_t> table(positions / 16);
    std::iota(table.begin(), table.end(), 0);
    const size_t segment = cache.view.segment_bytes;
    for (int32_t p = 0; p < positions; ++p) {
      std::memset(cache.view.KSegment(0, p / 16, p % 16, 0), 0, segment);  // scores 0
      auto* v = reinterpret_cast<uint8_t*>(cache.view.VSegment(0, p / 16, p % 16, 0));
      for (size_t b = 0; b < segment; ++b) v[b] = static_cast<uint8_t>(p * segment + b);
      if (p % 3 == 0) {  // random scale bytes too
        for (size_t b = 0; b < segment; ++b) v[b] = static_cast<uint8_t>(rng());
      }
    }
    std::vector<AttentionSequence> seqs;
    for (int32_t p = 0; p < positions; ++p) {
      seqs.push_back({p, 1, p, std::span<const int32_t>(table).first(p / 16 + 1)});
    }
    const std::vector<float> q(positions * hd, 0.0f);  // K bytes are irrelevant: zero query
    std::vector<float> want(hd);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      hwy::SupportedTargets();
      ThreadPool pool(2);
      AttentionScratch scratch(shape, positions, 2);
      std::vector<float> out(positions * hd);
      PagedAttention(shape, cache.view, 0, seqs, q.data(), out.data(), pool, scratch);
      for (int32_t p = 0; p < positions; ++p) {
        tensor::DequantizeRow(dtype, cache.view.VSegment(0, p / 16, p % 16, 0), want.data(), hd);
        for (int d = 0; d < hd; ++d) {
          const float got = out[p * hd + d];
          // out = fma(1, v, +0) * 1: v itself, except that -0 becomes +0.
          ASSERT_TRUE(std::isnan(want[d]) ? std::isnan(got) : SameBits(got, want[d] + 0.0f))
              << tensor::DTypeName(dtype) << " on " << AttentionTargetName() << " position " << p
              << " value " << d << ": " << got << " vs " << want[d];
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
    hwy::SupportedTargets();
  }
}

// A sink is one more softmax term without a value: with one visible key (score 0) the output
// is v / (1 + exp(sink)); a very large sink drives it to 0, a very small one leaves v.
TEST(PagedAttentionTest, SinksJoinTheDenominator) {
  const int hd = 16;
  const float sinks[3] = {std::log(3.0f), 200.0f, -200.0f};
  const AttentionShape shape{.num_heads = 3, .num_kv_heads = 1, .head_dim = hd, .scale = 1.0f,
                             .window = 1, .softcap = std::nullopt, .sinks = sinks};
  Cache cache(1, hd, DType::kF32, 16, 1);
  const std::vector<int32_t> table = {0};
  std::vector<float> k(hd, 0.0f), v(hd);
  for (int d = 0; d < hd; ++d) v[d] = static_cast<float>(d) - 5.0f;
  std::memcpy(cache.view.KSegment(0, 0, 0, 0), k.data(), hd * sizeof(float));
  std::memcpy(cache.view.VSegment(0, 0, 0, 0), v.data(), hd * sizeof(float));
  const std::vector<AttentionSequence> seqs = {{0, 1, 0, table}};
  const std::vector<float> q(3 * hd, 0.0f);
  std::vector<float> out(3 * hd);
  ThreadPool pool(1);
  AttentionScratch scratch(shape, 16, 1);
  PagedAttention(shape, cache.view, 0, seqs, q.data(), out.data(), pool, scratch);
  for (int d = 0; d < hd; ++d) {
    EXPECT_NEAR(out[d], v[d] / 4.0f, 1e-6f) << d;
    EXPECT_EQ(out[hd + d], 0.0f) << d;
    EXPECT_EQ(out[2 * hd + d], v[d]) << d;
  }
}

// attention_exp.h: exact at 0, 0 for very negative inputs, close to std::exp elsewhere.
TEST(AttentionExpTest, AccurateAndExactWhereTheContractNeedsIt) {
  EXPECT_EQ(AttentionExp(0.0f), 1.0f);
  EXPECT_EQ(AttentionExp(-0.0f), 1.0f);
  EXPECT_EQ(AttentionExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(AttentionExp(-90.0f), 0.0f);
  for (float x = -87.0f; x <= 0.0f; x += 0.001953125f) {
    const double want = std::exp(static_cast<double>(x));
    ASSERT_NEAR(AttentionExp(x), want, want * 3e-7) << x;
  }
}

}  // namespace
}  // namespace kvserve::kernels
