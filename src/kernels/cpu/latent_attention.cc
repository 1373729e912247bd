// Hybrid window + latent attention: the indexer, scratch and dispatch (the per-target
// attention is in latent_attention-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/latent_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/latent_attention-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/latent_attention.h"
#include "tensor/quant.h"

namespace kvserve::kernels {

HWY_EXPORT(AttendHybridRows);

namespace {

double IndexScore(const HybridAttentionShape& s, const float* q_idx, const float* w,
                  const float* key) {
  double score = 0;
  for (int h = 0; h < s.index_heads; ++h) {
    double dot = 0;
    const float* qh = q_idx + static_cast<int64_t>(h) * s.index_dim;
    for (int d = 0; d < s.index_dim; ++d) dot += static_cast<double>(qh[d]) * key[d];
    score += std::max(dot, 0.0) * static_cast<double>(w[h]);
  }
  return score;
}

// Keeps the `keep` best of `ids` by (score desc, id asc), in place; returns the count kept.
int KeepBest(std::vector<int32_t>& ids, int count, int keep, const double* score) {
  if (count <= keep) return count;
  auto better = [score](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  };
  std::nth_element(ids.begin(), ids.begin() + keep, ids.begin() + count, better);
  return keep;
}

// Candidate stage: restricts order[0, n) to the entries of the best candidate_blocks blocks.
int CandidateStage(const HybridAttentionShape& s, int32_t n, HybridAttentionScratch::Thread& t) {
  const int cbs = s.candidate_block_size;
  const int32_t num_blocks = (n + cbs - 1) / cbs;
  std::vector<double> block_score(num_blocks);  // small; only past the candidate threshold
  for (int32_t b = 0; b < num_blocks; ++b) {
    double best = t.entry_scores[static_cast<size_t>(b) * cbs];
    for (int32_t i = b * cbs; i < std::min(n, (b + 1) * cbs); ++i) {
      best = std::max(best, t.entry_scores[i]);
    }
    block_score[b] = best;
  }
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  const int kept = KeepBest(blocks, num_blocks, s.candidate_blocks, block_score.data());
  std::sort(blocks.begin(), blocks.begin() + kept);
  int count = 0;
  for (int k = 0; k < kept; ++k) {
    for (int32_t i = blocks[k] * cbs; i < std::min(n, (blocks[k] + 1) * cbs); ++i) {
      t.order[count++] = i;
    }
  }
  return count;
}

}  // namespace

HybridAttentionScratch::HybridAttentionScratch(const HybridAttentionShape& s,
                                               int32_t max_context_tokens, int num_threads)
    : max_context_tokens_(max_context_tokens),
      state_floats_(s.head_dim + 32),
      threads_(num_threads) {
  CHECK_EQ(s.head_dim % 16, 0) << "hybrid attention needs head_dim a multiple of 16";
  // Whole 16-row chunks: the last, partial chunk reads (and masks) rows past the list. A
  // window or top-k past the context holds at most the context's rows.
  const int32_t window = std::min(s.window, max_context_tokens);
  const int32_t top_k = std::clamp(s.top_k, 0, max_context_tokens);
  const size_t span = (static_cast<size_t>(window) + static_cast<size_t>(top_k) + 15) / 16 * 16;
  for (Thread& t : threads_) {
    t.rows.assign(span * s.head_dim, 0.0f);
    t.key_tile.assign(static_cast<size_t>(s.head_dim) * 16, 0.0f);
    t.states.resize(static_cast<size_t>(s.num_heads) * state_floats_);
    t.entry_scores.resize(max_context_tokens);
    t.order.resize(max_context_tokens);
    t.selected.resize(std::max(top_k, 1));
    t.key.resize(std::max(s.index_dim, 1));
  }
}

int SelectEntries(const HybridAttentionShape& s, const tensor::PagedLatentView& latent, int slot,
                  std::span<const int32_t> table, int32_t n, const float* q_idx, const float* w,
                  HybridAttentionScratch::Thread& t, int32_t* selected) {
  if (n <= 0) return 0;
  if (n <= s.top_k) {
    std::iota(selected, selected + n, 0);
    return n;
  }
  CHECK_LE(static_cast<size_t>(n), t.entry_scores.size());
  for (int32_t i = 0; i < n; ++i) {
    tensor::DequantizeRow(latent.index_dtype, LatentEntry(latent, slot, table, i, true),
                          t.key.data(), s.index_dim);
    t.entry_scores[i] = IndexScore(s, q_idx, w, t.key.data());
  }
  int count = n;
  if (static_cast<int64_t>(n) > static_cast<int64_t>(s.candidate_blocks) * s.candidate_block_size) {
    count = CandidateStage(s, n, t);
  } else {
    std::iota(t.order.begin(), t.order.begin() + n, 0);
  }
  const int kept = KeepBest(t.order, count, s.top_k, t.entry_scores.data());
  std::copy(t.order.begin(), t.order.begin() + kept, selected);
  std::sort(selected, selected + kept);
  return kept;
}

void HybridAttention(const HybridAttentionShape& s, const tensor::PagedKvView& window,
                     int window_slot, const tensor::PagedLatentView* latent, int latent_slot,
                     std::span<const HybridSequence> seqs, const float* q, const float* q_idx,
                     const float* idx_w, float* out, ThreadPool& pool,
                     HybridAttentionScratch& scratch) {
  CHECK_EQ(window.row_elems, s.head_dim);
  CHECK_EQ(window.num_segments(), 1);
  CHECK_GE(scratch.num_threads(), pool.num_threads());
  CHECK_EQ(scratch.state_floats(), s.head_dim + 32) << "scratch built for another head_dim";
  CHECK(s.ratio == 0 || latent != nullptr);
  CHECK(s.ratio == 0 || latent->latent_elems == s.head_dim);
  int64_t total = 0;
  for (const HybridSequence& seq : seqs) {
    CHECK_LE(seq.start_pos + seq.num_tokens, scratch.max_context_tokens());
    total += seq.num_tokens;
  }
  const internal::HybridCall call{&s, &window, window_slot, latent, latent_slot, seqs,
                                  q,  q_idx,   idx_w,       out,    &scratch};
  pool.ParallelFor(static_cast<size_t>(total), [c = &call](size_t begin, size_t end, int thread) {
    HWY_DYNAMIC_DISPATCH(AttendHybridRows)(c, begin, end, thread);
  });
}

void WriteWindowRows(const tensor::PagedKvView& window, int slot,
                     std::span<const HybridSequence> seqs, const float* rows) {
  for (const HybridSequence& seq : seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      const int32_t pos = seq.start_pos + i;
      const int32_t block = seq.window_table[pos / window.block_size];
      tensor::QuantizeRow(window.dtype, rows + (seq.first_row + i) * window.row_elems,
                          window.KSegment(slot, block, pos % window.block_size, 0), window.row_elems);
    }
  }
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
