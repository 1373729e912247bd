// Differential test of kernels::PagedAttention against naive float64 attention over contiguous
// K/V, dequantized as stored. Random shapes, GQA/MQA, sliding windows, ragged sequences,
// scattered block tables, every KV dtype.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/kv_dequant.h"
#include "kernels/cpu/ops.h"
#include "support/kv_arena.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

std::vector<float> RandomFloats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One stored K or V row, dequantized segment by segment with the scalar reference converter.
std::vector<float> ReadRow(const tensor::PagedKvView& kv, KvPart part, int32_t block, int slot) {
  std::vector<float> row(kv.row_elems);
  for (int g = 0; g < kv.num_segments(); ++g) {
    const std::byte* src = part == KvPart::kKey ? kv.KSegment(0, block, slot, g)
                                                : kv.VSegment(0, block, slot, g);
    tensor::DequantizeRow(kv.dtype, src, row.data() + g * kv.segment_elems, kv.segment_elems);
  }
  return row;
}

// Naive attention for one (row, head) over the cache as stored.
std::vector<double> NaiveHead(const AttentionShape& shape, const tensor::PagedKvView& kv,
                              const AttentionSequence& seq, int64_t row, int head, const float* q) {
  const int hd = shape.head_dim;
  const int kvh = head / (shape.num_heads / shape.num_kv_heads);
  const int32_t pos = seq.start_pos + static_cast<int32_t>(row - seq.first_row);
  const int32_t lo = shape.window ? std::max(0, pos - *shape.window + 1) : 0;
  std::vector<double> scores, out(hd, 0.0);
  std::vector<std::vector<float>> vs;
  for (int32_t j = lo; j <= pos; ++j) {
    const int32_t block = seq.block_table[j / kv.block_size];
    const std::vector<float> k = ReadRow(kv, KvPart::kKey, block, j % kv.block_size);
    const std::vector<float> v = ReadRow(kv, KvPart::kValue, block, j % kv.block_size);
    double s = 0;
    for (int d = 0; d < hd; ++d) s += static_cast<double>(q[head * hd + d]) * k[kvh * hd + d];
    scores.push_back(s * shape.scale);
    vs.emplace_back(v.begin() + kvh * hd, v.begin() + (kvh + 1) * hd);
  }
  const double mx = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  for (double& s : scores) total += (s = std::exp(s - mx));
  for (size_t j = 0; j < scores.size(); ++j) {
    for (int d = 0; d < hd; ++d) out[d] += scores[j] / total * vs[j][d];
  }
  return out;
}

void RunTrial(std::mt19937& rng, tensor::DType dtype) {
  AttentionShape shape;
  shape.num_kv_heads = 1 + static_cast<int>(rng() % 3);
  shape.num_heads = shape.num_kv_heads * (1 + static_cast<int>(rng() % 3));
  shape.head_dim = (rng() % 2) ? 32 : 64;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  if (rng() % 2) shape.window = 1 + static_cast<int32_t>(rng() % 20);
  const int block_size = std::vector<int>{1, 4, 16}[rng() % 3];
  const int row_elems = shape.num_kv_heads * shape.head_dim;

  // Sequences with scattered blocks taken from one shuffled pool.
  const int num_seqs = 1 + static_cast<int>(rng() % 3);
  std::vector<int32_t> starts, counts;
  int32_t blocks_needed = 0;
  for (int s = 0; s < num_seqs; ++s) {
    starts.push_back(static_cast<int32_t>(rng() % 41));
    counts.push_back(1 + static_cast<int32_t>(rng() % 10));
    blocks_needed += kvserve::testing::BlocksForTokens(starts.back() + counts.back(), block_size);
  }
  std::vector<int32_t> pool_blocks(blocks_needed);
  std::iota(pool_blocks.begin(), pool_blocks.end(), 0);
  std::shuffle(pool_blocks.begin(), pool_blocks.end(), rng);
  kvserve::testing::SimpleKvArena arena(1, shape.num_kv_heads, shape.head_dim, dtype, block_size,
                                        blocks_needed);
  const tensor::PagedKvView& kv = arena.view();
  std::vector<std::vector<int32_t>> tables(num_seqs);
  std::vector<AttentionSequence> seqs;
  int64_t rows = 0;
  size_t next_block = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t nb = kvserve::testing::BlocksForTokens(starts[s] + counts[s], block_size);
    tables[s].assign(pool_blocks.begin() + next_block, pool_blocks.begin() + next_block + nb);
    next_block += nb;
    // Earlier steps' K/V, as a previous Forward would have stored them.
    for (int32_t p = 0; p < starts[s]; ++p) {
      const int32_t block = tables[s][p / block_size];
      std::vector<float> k = RandomFloats(rng, row_elems), v = RandomFloats(rng, row_elems);
      StoreKvRow(kv, 0, KvPart::kKey, block, p % block_size, k.data());
      StoreKvRow(kv, 0, KvPart::kValue, block, p % block_size, v.data());
    }
    seqs.push_back({rows, counts[s], starts[s], tables[s]});
    rows += counts[s];
  }
  const int q_width = shape.num_heads * shape.head_dim;
  const std::vector<float> q = RandomFloats(rng, rows * q_width);
  const std::vector<float> k = RandomFloats(rng, rows * row_elems);
  const std::vector<float> v = RandomFloats(rng, rows * row_elems);
  std::vector<float> out(rows * q_width, -7.0f);
  ThreadPool pool(2);
  AttentionScratch scratch(shape, 64, 2);
  WriteKv(kv, 0, seqs, k.data(), v.data(), pool);
  PagedAttention(shape, kv, 0, seqs, q.data(), out.data(), pool, scratch);

  for (const AttentionSequence& seq : seqs) {
    for (int64_t row = seq.first_row; row < seq.first_row + seq.num_tokens; ++row) {
      for (int h = 0; h < shape.num_heads; ++h) {
        const std::vector<double> want =
            NaiveHead(shape, kv, seq, row, h, q.data() + row * q_width);
        for (int d = 0; d < shape.head_dim; ++d) {
          ASSERT_NEAR(out[row * q_width + h * shape.head_dim + d], want[d], 2e-5)
              << tensor::DTypeName(dtype) << " row " << row << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(PagedAttentionTest, MatchesNaiveDoubleAttentionOverStoredKv) {
  std::mt19937 rng(1234);
  for (tensor::DType dtype :
       {tensor::DType::kF32, tensor::DType::kF16, tensor::DType::kBF16, tensor::DType::kQ8_0,
        tensor::DType::kFP8_E4M3_E8M0_32, tensor::DType::kFP4_E2M1_E4M3_16}) {
    for (int trial = 0; trial < 12; ++trial) {
      RunTrial(rng, dtype);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(RopeTest, LinearScalingDividesThePosition) {
  RopeParams plain{.head_dim = 8, .rope_dim = 8, .freq_base = 10000.0, .linear_scale = 1.0};
  RopeParams scaled = plain;
  scaled.linear_scale = 2.0;
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = a;
  Rope(plain, a.data(), 1, 3);
  Rope(scaled, b.data(), 1, 6);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
  // Pair 0 rotates by exactly pos radians; dims beyond rope_dim pass through.
  RopeParams partial{.head_dim = 8, .rope_dim = 4, .freq_base = 10000.0, .linear_scale = 1.0};
  std::vector<float> c = {1, 0, 1, 0, 9, 9, 9, 9};
  Rope(partial, c.data(), 1, 1);
  EXPECT_NEAR(c[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(c[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(c[2], std::cos(0.01), 1e-6);  // 10000^(-2/4) = 0.01
  EXPECT_EQ(c[4], 9.0f);
}

}  // namespace
}  // namespace kvserve::kernels
