// HybridAttention (kernels/cpu/latent_attention.h) against a naive float64 reference over dense
// contiguous rows (quantized only as the cache stores them), including the indexer's selection,
// its tie rule and the candidate stage; bit-identical across thread counts and SIMD targets.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/latent_attention.h"
#include "support/simd_targets.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;
constexpr DType kWindowType = DType::kFP8_E4M3_E8M0_32;
constexpr DType kLatentType = DType::kFP4_E2M1_E4M3_16;
constexpr DType kIndexType = DType::kFP4_E2M1_E8M0_32;
constexpr int kBlock = 8;

// A paged cache of one layer (window + latent), its contents also kept dense (dequantized).
struct Cache {
  int num_blocks = 0;
  std::vector<std::byte> window_buf, latent_buf;
  tensor::PagedKvView window;
  tensor::PagedLatentView latent;
  std::vector<int32_t> table;                            // scattered block ids
  std::vector<std::vector<double>> rows, entries, keys;  // dense, as stored
};

Cache MakeCache(const HybridAttentionShape& s, int tokens, bool same_keys, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Cache c;
  c.num_blocks = (tokens + kBlock - 1) / kBlock + 3;
  c.table.resize(c.num_blocks - 3);
  std::vector<int32_t> ids(c.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::copy_n(ids.begin(), c.table.size(), c.table.begin());
  const size_t row_bytes = tensor::RowBytes(kWindowType, s.head_dim);
  c.window_buf.resize(c.num_blocks * kBlock * row_bytes);
  c.window = tensor::MakePagedKvView(1, 1, s.head_dim, kWindowType, kBlock);
  c.window.layers[0] = {c.window_buf.data(), c.window_buf.data(), kBlock * row_bytes};
  const int epb = kBlock / s.ratio;
  const size_t lat_bytes = tensor::RowBytes(kLatentType, s.head_dim);
  const size_t idx_bytes = tensor::RowBytes(kIndexType, s.index_dim);
  const size_t page = epb * (lat_bytes + idx_bytes);
  c.latent_buf.resize(c.num_blocks * page);
  c.latent = {kBlock, s.ratio, kLatentType, s.head_dim, kIndexType, s.index_dim, {{}}};
  c.latent.layers[0] = {c.latent_buf.data(), c.latent_buf.data() + epb * lat_bytes, page, lat_bytes,
                        idx_bytes};
  std::vector<float> v(s.head_dim), back(s.head_dim), key(s.index_dim), kback(s.index_dim);
  std::vector<float> shared_key(s.index_dim);
  for (float& x : shared_key) x = u(rng);
  for (int p = 0; p < tokens; ++p) {
    for (float& x : v) x = u(rng);
    std::byte* dst = c.window.KSegment(0, c.table[p / kBlock], p % kBlock, 0);
    tensor::QuantizeRow(kWindowType, v.data(), dst, s.head_dim);
    tensor::DequantizeRow(kWindowType, dst, back.data(), s.head_dim);
    c.rows.emplace_back(back.begin(), back.end());
  }
  for (int i = 0; i < tokens / s.ratio; ++i) {
    for (float& x : v) x = u(rng);
    for (float& x : key) x = u(rng);
    if (same_keys) key = shared_key;
    const int token = i * s.ratio;
    std::byte* lat = c.latent.LatentRow(0, c.table[token / kBlock], (token % kBlock) / s.ratio);
    std::byte* idx = c.latent.IndexRow(0, c.table[token / kBlock], (token % kBlock) / s.ratio);
    tensor::QuantizeRow(kLatentType, v.data(), lat, s.head_dim);
    tensor::DequantizeRow(kLatentType, lat, back.data(), s.head_dim);
    tensor::QuantizeRow(kIndexType, key.data(), idx, s.index_dim);
    tensor::DequantizeRow(kIndexType, idx, kback.data(), s.index_dim);
    c.entries.emplace_back(back.begin(), back.end());
    c.keys.emplace_back(kback.begin(), kback.end());
  }
  return c;
}

// ---- the reference ----

std::vector<int> RefSelect(const HybridAttentionShape& s, const Cache& c, int visible,
                           const float* q_idx, const float* w) {
  std::vector<int> all(visible);
  std::iota(all.begin(), all.end(), 0);
  if (visible <= s.top_k) return all;
  std::vector<double> score(visible);
  for (int i = 0; i < visible; ++i) {
    double total = 0;
    for (int h = 0; h < s.index_heads; ++h) {
      double dot = 0;
      for (int d = 0; d < s.index_dim; ++d)
        dot += double{q_idx[h * s.index_dim + d]} * c.keys[i][d];
      total += (dot > 0 ? dot : 0) * double{w[h]};
    }
    score[i] = total;
  }
  auto better = [&](int a, int b) { return score[a] != score[b] ? score[a] > score[b] : a < b; };
  std::vector<int> pool = all;
  const int cbs = s.candidate_block_size;
  if (visible > s.candidate_blocks * cbs) {
    const int nb = (visible + cbs - 1) / cbs;
    std::vector<double> bscore(nb, -INFINITY);
    for (int i = 0; i < visible; ++i) bscore[i / cbs] = std::max(bscore[i / cbs], score[i]);
    std::vector<int> blocks(nb);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::sort(blocks.begin(), blocks.end(),
              [&](int a, int b) { return bscore[a] != bscore[b] ? bscore[a] > bscore[b] : a < b; });
    blocks.resize(s.candidate_blocks);
    pool.clear();
    for (int i = 0; i < visible; ++i) {
      if (std::find(blocks.begin(), blocks.end(), i / cbs) != blocks.end()) pool.push_back(i);
    }
  }
  std::sort(pool.begin(), pool.end(), better);
  pool.resize(std::min<size_t>(pool.size(), s.top_k));
  std::sort(pool.begin(), pool.end());
  return pool;
}

std::vector<double> RefAttend(const HybridAttentionShape& s, const Cache& c, int p, const float* q,
                              const float* q_idx, const float* w) {
  std::vector<const std::vector<double>*> rows;
  for (int j = std::max(0, p - s.window + 1); j <= p; ++j) rows.push_back(&c.rows[j]);
  for (int i : RefSelect(s, c, (p + 1) / s.ratio, q_idx, w)) rows.push_back(&c.entries[i]);
  std::vector<double> out(s.num_heads * s.head_dim, 0.0);
  for (int h = 0; h < s.num_heads; ++h) {
    std::vector<double> logit(rows.size());
    for (size_t j = 0; j < rows.size(); ++j) {
      double dot = 0;
      for (int d = 0; d < s.head_dim; ++d) dot += double{q[h * s.head_dim + d]} * (*rows[j])[d];
      logit[j] = dot * s.scale;
    }
    const double m = *std::max_element(logit.begin(), logit.end());
    double sum = 0;
    for (double& l : logit) sum += (l = std::exp(l - m));
    for (size_t j = 0; j < rows.size(); ++j) {
      for (int d = 0; d < s.head_dim; ++d)
        out[h * s.head_dim + d] += logit[j] / sum * (*rows[j])[d];
    }
  }
  return out;
}

HybridAttentionShape TestShape() {
  HybridAttentionShape s;
  s.num_heads = 3;
  s.head_dim = 64;
  s.scale = 0.125f;
  s.window = 8;
  s.ratio = 2;
  s.index_heads = 2;
  s.index_dim = 32;
  s.top_k = 5;
  return s;
}

struct Inputs {
  std::vector<float> q, q_idx, w;
};

Inputs RandomInputs(const HybridAttentionShape& s, int rows, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in;
  in.q.resize(rows * s.num_heads * s.head_dim);
  in.q_idx.resize(rows * s.index_heads * s.index_dim);
  in.w.resize(rows * s.index_heads);
  for (float& x : in.q) x = 2.0f * u(rng);
  for (float& x : in.q_idx) x = u(rng);
  for (float& x : in.w) x = u(rng);
  return in;
}

// Runs the kernel on two sequences sharing the cache (chunks [3, 17) and [17, 40)) and checks
// every row against the reference.
void CheckAgainstReference(const HybridAttentionShape& s, int tokens, bool same_keys,
                           uint32_t seed) {
  std::mt19937 rng(seed);
  Cache c = MakeCache(s, tokens, same_keys, rng);
  const int first = 3;
  const int rows = tokens - first;
  Inputs in = RandomInputs(s, rows, rng);
  const int split = 17 - first;
  std::vector<HybridSequence> seqs = {{0, split, first, c.table, c.table},
                                      {split, rows - split, first + split, c.table, c.table}};
  std::vector<float> out(in.q.size()), out3(in.q.size());
  ThreadPool one(1), three(3);
  HybridAttentionScratch scratch(s, tokens, 3);
  HybridAttention(s, c.window, 0, &c.latent, 0, seqs, in.q.data(), in.q_idx.data(), in.w.data(),
                  out.data(), one, scratch);
  HybridAttention(s, c.window, 0, &c.latent, 0, seqs, in.q.data(), in.q_idx.data(), in.w.data(),
                  out3.data(), three, scratch);
  EXPECT_EQ(out, out3) << "thread count changed the result";
  const kvserve::testing::SimdTargetReset reset_targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {  // and no SIMD target does
    hwy::SetSupportedTargetsForTest(target);
    hwy::SupportedTargets();
    std::vector<float> other(in.q.size());
    HybridAttention(s, c.window, 0, &c.latent, 0, seqs, in.q.data(), in.q_idx.data(), in.w.data(),
                    other.data(), three, scratch);
    EXPECT_EQ(std::memcmp(other.data(), out.data(), out.size() * sizeof(float)), 0)
        << "SIMD target " << hwy::TargetName(target) << " changed the result";
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::SupportedTargets();
  std::vector<int32_t> selected(s.top_k);
  int num_selections = 0;
  for (int r = 0; r < rows; ++r) {
    const int p = first + r;
    const float* qi = in.q_idx.data() + r * s.index_heads * s.index_dim;
    const float* wi = in.w.data() + r * s.index_heads;
    const std::vector<int> want = RefSelect(s, c, (p + 1) / s.ratio, qi, wi);
    const int n = SelectEntries(s, c.latent, 0, c.table, (p + 1) / s.ratio, qi, wi,
                                scratch.thread(0), selected.data());
    ASSERT_EQ(std::vector<int>(selected.begin(), selected.begin() + n), want) << "position " << p;
    num_selections += (p + 1) / s.ratio > s.top_k;
    const std::vector<double> ref =
        RefAttend(s, c, p, in.q.data() + r * s.num_heads * s.head_dim, qi, wi);
    for (size_t k = 0; k < ref.size(); ++k) {
      ASSERT_NEAR(out[r * ref.size() + k], ref[k], 2e-5 + 2e-5 * std::abs(ref[k]))
          << "position " << p << " element " << k;
    }
  }
  EXPECT_GT(num_selections, 5) << "the test must exercise the indexer";
}

TEST(V41Attention, MatchesFloat64Reference) {
  CheckAgainstReference(TestShape(), 40, false, 7);
}

TEST(V41Attention, RatioOneMatchesReference) {
  HybridAttentionShape s = TestShape();
  s.ratio = 1;
  s.top_k = 9;
  CheckAgainstReference(s, 40, false, 11);
}

TEST(V41Attention, TiesGoToTheLowerEntry) {
  HybridAttentionShape s = TestShape();
  CheckAgainstReference(s, 40, true, 13);
  // With identical keys every score ties: the first top_k entries win.
  std::mt19937 rng(5);
  Cache c = MakeCache(s, 40, true, rng);
  Inputs in = RandomInputs(s, 1, rng);
  HybridAttentionScratch scratch(s, 40, 1);
  std::vector<int32_t> selected(s.top_k);
  const int n = SelectEntries(s, c.latent, 0, c.table, 20, in.q_idx.data(), in.w.data(),
                              scratch.thread(0), selected.data());
  EXPECT_EQ(std::vector<int32_t>(selected.begin(), selected.begin() + n),
            (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(V41Attention, CandidateStageMatchesReference) {
  HybridAttentionShape s = TestShape();
  s.candidate_blocks = 2;
  s.candidate_block_size = 4;  // past 8 visible entries the candidate stage restricts
  CheckAgainstReference(s, 48, false, 17);
}

TEST(V41Attention, FewEntriesSelectsAll) {
  HybridAttentionShape s = TestShape();
  std::mt19937 rng(3);
  Cache c = MakeCache(s, 16, false, rng);
  Inputs in = RandomInputs(s, 1, rng);
  HybridAttentionScratch scratch(s, 16, 1);
  std::vector<int32_t> selected(s.top_k);
  EXPECT_EQ(SelectEntries(s, c.latent, 0, c.table, 0, in.q_idx.data(), in.w.data(),
                          scratch.thread(0), selected.data()),
            0);
  const int n = SelectEntries(s, c.latent, 0, c.table, 4, in.q_idx.data(), in.w.data(),
                              scratch.thread(0), selected.data());
  EXPECT_EQ(std::vector<int32_t>(selected.begin(), selected.begin() + n),
            (std::vector<int32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace kvserve::kernels
