// MlaAttention (kernels/cpu/mla_attention.h) against two independent statements of it:
// bit for bit against the scalar attention contract (attention_reference.h) run over a plain
// f32 copy of the dequantized latent rows (K = V = the row, first kv_lora_rank values kept),
// and within float rounding against a naive float64 softmax over the latent. Every latent
// dtype, several shapes, block sizes 1 to 32 with shuffled block tables and padded blocks,
// ragged batches mixing decodes (past several 256-position partitions) and prefill chunks,
// 1 and 3 threads, every SIMD target this machine supports.
#include "kernels/cpu/mla_attention.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention_reference.h"
#include "support/simd_targets.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;
using testing::MakeScatteredBatch;
using testing::RandomFloats;
using testing::SameBits;
using testing::ScatteredBatch;

constexpr DType kLatentTypes[] = {DType::kF32,  DType::kF16,
                                  DType::kBF16, DType::kQ8_0,
                                  DType::kFP8_E4M3_E8M0_32, DType::kFP4_E2M1_E4M3_16};
constexpr size_t kBlockPadding = 64;  // bytes after each block's rows (another group's data)

// Two layers of latent rows in padded blocks; the kernel reads layer 1.
struct LatentCache {
  LatentCache(int dim, DType dtype, int block_size, int32_t blocks) {
    const size_t row = static_cast<size_t>(tensor::RowBytes(dtype, dim));
    const size_t block = row * block_size + kBlockPadding;
    bytes.assign(2 * block * blocks, std::byte{0x7F});  // stale bytes everywhere
    view.block_size = block_size;
    view.latent_dtype = dtype;
    view.latent_elems = dim;
    for (int l = 0; l < 2; ++l) {
      view.layers.push_back({bytes.data() + l * block * blocks, nullptr, block, row, 0});
    }
  }
  tensor::PagedLatentView view;
  std::vector<std::byte> bytes;
};

// Sequences (start, count) with shuffled blocks; positions before start hold random rows.
ScatteredBatch MakeBatch(std::mt19937& rng, LatentCache& cache,
                         const std::vector<std::pair<int32_t, int32_t>>& spec) {
  const tensor::PagedLatentView& v = cache.view;
  return MakeScatteredBatch(rng, v.block_size, spec, [&](std::span<const int32_t> table,
                                                         int32_t p) {
    tensor::QuantizeRow(v.latent_dtype, RandomFloats(rng, v.latent_elems).data(),
                        v.LatentRow(1, table[p / v.block_size], p % v.block_size),
                        v.latent_elems);
  });
}

// The sequence's dequantized latent rows [0, positions) as an f32 one-head K/V cache with
// one position per block (K and V the same rows), for the scalar reference.
struct PlainCopy {
  PlainCopy(const tensor::PagedLatentView& v, const AttentionSequence& seq, int32_t positions) {
    const int dim = v.latent_elems;
    rows.resize(static_cast<size_t>(positions) * dim);
    for (int32_t p = 0; p < positions; ++p) {
      tensor::DequantizeRow(v.latent_dtype,
                            v.LatentRow(1, seq.block_table[p / v.block_size], p % v.block_size),
                            rows.data() + static_cast<size_t>(p) * dim, dim);
    }
    view = tensor::MakePagedKvView(1, 1, dim, DType::kF32, 1);
    auto* base = reinterpret_cast<std::byte*>(rows.data());
    view.layers[0] = {base, base, sizeof(float) * dim};
    table.resize(positions);
    std::iota(table.begin(), table.end(), 0);
  }
  std::vector<float> rows;
  tensor::PagedKvView view;
  std::vector<int32_t> table;
};

// out[h] of the header comment in float64 over the f32 rows.
std::vector<double> NaiveMla(const MlaShape& shape, const PlainCopy& plain, int32_t pos,
                             const float* q) {
  const int dim = shape.latent_dim();
  std::vector<double> s(pos + 1);
  double top = -INFINITY;
  for (int32_t j = 0; j <= pos; ++j) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * plain.rows[static_cast<size_t>(j) * dim + d];
    s[j] = shape.scale * dot;
    top = std::max(top, s[j]);
  }
  double sum = 0;
  std::vector<double> out(shape.kv_lora_rank, 0.0);
  for (int32_t j = 0; j <= pos; ++j) {
    const double p = std::exp(s[j] - top);
    sum += p;
    for (int d = 0; d < shape.kv_lora_rank; ++d) out[d] += p * plain.rows[static_cast<size_t>(j) * dim + d];
  }
  for (double& x : out) x /= sum;
  return out;
}

// Writes the batch's new rows with WriteLatentRows, runs MlaAttention on every target with 1
// and 3 threads and compares every output value with both references. decode_path: the step
// must run on the decode path (mla_attention.h) on the AVX-512 targets, and only there.
void Check(std::mt19937& rng, const MlaShape& shape, DType dtype, int block_size,
           const std::vector<std::pair<int32_t, int32_t>>& spec, bool decode_path = false) {
  const int dim = shape.latent_dim();
  int32_t max_context = 1, blocks = 0;
  for (auto [start, count] : spec) {
    max_context = std::max(max_context, start + count);
    blocks += (start + count + block_size - 1) / block_size;
  }
  LatentCache cache(dim, dtype, block_size, blocks);
  ScatteredBatch batch = MakeBatch(rng, cache, spec);
  const int64_t width = int64_t{shape.num_heads} * dim;
  const std::vector<float> q = RandomFloats(rng, batch.rows * width);
  {
    ThreadPool pool(2);
    WriteLatentRows(cache.view, 1, batch.seqs, RandomFloats(rng, batch.rows * dim).data(), pool);
  }
  AttentionShape as;
  as.num_heads = shape.num_heads;
  as.num_kv_heads = 1;
  as.head_dim = dim;
  as.scale = shape.scale;
  std::vector<float> want(batch.rows * width);
  for (const AttentionSequence& seq : batch.seqs) {
    const PlainCopy plain(cache.view, seq, seq.start_pos + seq.num_tokens);
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      const int64_t row = seq.first_row + i;
      for (int h = 0; h < shape.num_heads; ++h) {
        const float* qh = q.data() + row * width + int64_t{h} * dim;
        const std::vector<float> ref = testing::ReferenceAttention(
            as, plain.view, 0, plain.table, seq.start_pos + i, h, qh);
        std::copy(ref.begin(), ref.end(), want.begin() + row * width + int64_t{h} * dim);
        const std::vector<double> naive = NaiveMla(shape, plain, seq.start_pos + i, qh);
        for (int d = 0; d < shape.kv_lora_rank; ++d) {
          ASSERT_NEAR(ref[d], naive[d], 1e-5) << "position " << seq.start_pos + i << " head " << h;
        }
      }
    }
  }
  const kvserve::testing::SimdTargetReset reset_targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    hwy::SupportedTargets();
    for (int threads : {1, 3}) {
      if (decode_path) {
        const std::string target = AttentionTargetName();
        ASSERT_EQ(MlaDecodePath(shape, cache.view, batch.seqs, threads),
                  target == "AVX3" || target == "AVX3_DL")
            << target << ", " << threads << " threads";
      }
      ThreadPool pool(threads);
      MlaScratch scratch(shape, max_context, threads);
      std::vector<float> out(batch.rows * width, -7.0f);
      MlaAttention(shape, cache.view, 1, batch.seqs, q.data(), out.data(), pool, scratch);
      for (int64_t r = 0; r < batch.rows; ++r) {
        for (int h = 0; h < shape.num_heads; ++h) {
          for (int d = 0; d < shape.kv_lora_rank; ++d) {
            const int64_t i = r * width + int64_t{h} * dim + d;
            ASSERT_TRUE(SameBits(out[i], want[i]))
                << tensor::DTypeName(dtype) << " on " << AttentionTargetName() << ", " << threads
                << " threads, block " << block_size << ", row " << r << " head " << h
                << " value " << d << ": " << out[i] << ", reference " << want[i];
          }
          for (int d = shape.kv_lora_rank; d < dim; ++d) {  // the rope part: left as it was
            ASSERT_EQ(out[r * width + int64_t{h} * dim + d], -7.0f) << "row " << r << " head " << h;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::SupportedTargets();
}

TEST(MlaAttentionTest, MatchesReferencesOnEveryDtypeTargetAndThreadCount) {
  std::mt19937 rng(2026);
  const MlaShape shapes[] = {{.num_heads = 4, .kv_lora_rank = 64, .rope_dim = 32, .scale = 0.1f},
                             {.num_heads = 8, .kv_lora_rank = 256, .rope_dim = 64, .scale = 0.06f},
                             {.num_heads = 3, .kv_lora_rank = 96, .rope_dim = 32, .scale = 0.2f}};
  int trial = 0;
  for (DType dtype : kLatentTypes) {
    for (int k = 0; k < 2; ++k) {  // two of the shapes per dtype, in turn
      const MlaShape& shape = shapes[(trial + k) % 3];
      const int block_size = std::vector<int>{1, 4, 16, 32}[trial++ % 4];
      // A decode past two partition boundaries, a prefill chunk, a fresh prompt, a decode.
      const std::vector<std::pair<int32_t, int32_t>> spec = {
          {static_cast<int32_t>(520 + rng() % 80), 1},
          {static_cast<int32_t>(rng() % 300), static_cast<int32_t>(17 + rng() % 40)},
          {0, static_cast<int32_t>(1 + rng() % 20)},
          {static_cast<int32_t>(rng() % 50), 1}};
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " heads " +
                   std::to_string(shape.num_heads) + " block " + std::to_string(block_size));
      Check(rng, shape, dtype, block_size, spec);
      if (HasFatalFailure()) return;
    }
  }
}

// 16 decodes side by side (the batched decode step) and one alone: the same bits per
// sequence as the reference, whichever split of work the batch size and threads give.
TEST(MlaAttentionTest, BatchedAndLoneDecodesMatchReference) {
  std::mt19937 rng(16);
  const MlaShape shape{.num_heads = 8, .kv_lora_rank = 256, .rope_dim = 64, .scale = 0.06f};
  std::vector<std::pair<int32_t, int32_t>> sixteen;
  for (int s = 0; s < 16; ++s) sixteen.push_back({static_cast<int32_t>(100 + rng() % 200), 1});
  Check(rng, shape, DType::kF16, 16, sixteen);
  if (HasFatalFailure()) return;
  Check(rng, shape, DType::kF16, 16, {{1500, 1}});
}

// Steps of decodes only on the decode path (mla_attention.h): head counts that leave 2 and 1
// heads after the passes of 4, chunks cut by the position (1 to 16 rows), partition
// boundaries (255, 256, 511, 512), position 0, NaN bytes in the block slots past a
// sequence's position (LatentCache's stale 0x7F7F halves: masked, never accumulated), block
// sizes 16 and 32, 14 sequences (enough for 3 threads) and 2 short ones.
TEST(MlaAttentionTest, DecodePathMatchesReference) {
  std::mt19937 rng(77);
  const MlaShape shapes[] = {{.num_heads = 8, .kv_lora_rank = 256, .rope_dim = 64, .scale = 0.06f},
                             {.num_heads = 7, .kv_lora_rank = 96, .rope_dim = 32, .scale = 0.2f},
                             {.num_heads = 16, .kv_lora_rank = 64, .rope_dim = 16, .scale = 0.1f},
                             {.num_heads = 1, .kv_lora_rank = 32, .rope_dim = 16, .scale = 0.3f}};
  for (const MlaShape& shape : shapes) {
    for (int block_size : {16, 32}) {
      SCOPED_TRACE("heads " + std::to_string(shape.num_heads) + " block " +
                   std::to_string(block_size));
      std::vector<std::pair<int32_t, int32_t>> spec = {{0, 1},   {15, 1},  {16, 1},  {255, 1},
                                                       {256, 1}, {511, 1}, {512, 1}};
      while (spec.size() < 14) spec.push_back({static_cast<int32_t>(rng() % 700), 1});
      Check(rng, shape, DType::kF16, block_size, spec, /*decode_path=*/true);
      if (HasFatalFailure()) return;
      Check(rng, shape, DType::kF16, block_size, {{40, 1}, {255, 1}}, /*decode_path=*/true);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(MlaAttentionDeathTest, RejectsRowsNotBackToBack) {
  const MlaShape shape{.num_heads = 2, .kv_lora_rank = 32, .rope_dim = 16, .scale = 0.1f};
  LatentCache cache(shape.latent_dim(), DType::kF16, 16, 1);
  cache.view.layers[1].latent_stride_bytes += 2;
  const std::vector<int32_t> table = {0};
  const std::vector<AttentionSequence> seqs = {{0, 1, 0, table}};
  std::vector<float> q(2 * 48, 0.5f), out(2 * 48);
  ThreadPool pool(1);
  MlaScratch scratch(shape, 16, 1);
  EXPECT_DEATH(MlaAttention(shape, cache.view, 1, seqs, q.data(), out.data(), pool, scratch),
               "back to back");
}

}  // namespace
}  // namespace kvserve::kernels
