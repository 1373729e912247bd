#include "kernels/cpu/latent_attention.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "kernels/cpu/ops.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

// (block, entry slot) of entry i. Example: ratio 2, block 16, i = 11: token 22 -> block
// table[1], entry slot (22 % 16) / 2 = 3.
const std::byte* EntryPtr(const tensor::PagedLatentView& v, int slot,
                          std::span<const int32_t> table, int32_t i, bool index_row) {
  const int64_t token = static_cast<int64_t>(i) * v.compress_ratio;
  const int32_t block = table[token / v.block_size];
  const int entry = static_cast<int>((token % v.block_size) / v.compress_ratio);
  return index_row ? v.IndexRow(slot, block, entry) : v.LatentRow(slot, block, entry);
}

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
    : max_context_tokens_(max_context_tokens), threads_(num_threads) {
  const size_t span = static_cast<size_t>(s.window) + std::max(s.top_k, 0);
  for (Thread& t : threads_) {
    t.rows.resize(span * s.head_dim);
    t.scores.resize(span);
    t.entry_scores.resize(max_context_tokens);
    t.order.resize(max_context_tokens);
    t.selected.resize(std::max(s.top_k, 1));
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
    tensor::DequantizeRow(latent.index_dtype, EntryPtr(latent, slot, table, i, true), t.key.data(),
                          s.index_dim);
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

namespace {

// One query row: gather rows, one softmax per head, weighted sum.
void AttendRow(const HybridAttentionShape& s, const tensor::PagedKvView& window, int window_slot,
               const tensor::PagedLatentView* latent, int latent_slot, const HybridSequence& seq,
               int32_t i, const float* q, const float* q_idx, const float* idx_w, float* out,
               HybridAttentionScratch::Thread& t) {
  const int32_t p = seq.start_pos + i;
  const int64_t row = seq.first_row + i;
  const int d = s.head_dim;
  const int32_t lo = std::max(0, p - s.window + 1);
  int n = 0;
  for (int32_t pos = lo; pos <= p; ++pos, ++n) {
    const int32_t block = seq.window_table[pos / window.block_size];
    tensor::DequantizeRow(window.dtype, window.KSegment(window_slot, block, pos % window.block_size, 0),
                          t.rows.data() + static_cast<size_t>(n) * d, d);
  }
  if (s.ratio > 0) {
    const int32_t visible = (p + 1) / s.ratio;
    const int num_selected = SelectEntries(s, *latent, latent_slot, seq.latent_table, visible,
                                           q_idx + row * s.index_heads * s.index_dim,
                                           idx_w + row * s.index_heads, t, t.selected.data());
    for (int k = 0; k < num_selected; ++k, ++n) {
      tensor::DequantizeRow(latent->latent_dtype,
                            EntryPtr(*latent, latent_slot, seq.latent_table, t.selected[k], false),
                            t.rows.data() + static_cast<size_t>(n) * d, d);
    }
  }
  for (int h = 0; h < s.num_heads; ++h) {
    const float* qh = q + (row * s.num_heads + h) * d;
    for (int j = 0; j < n; ++j) {
      const float* r = t.rows.data() + static_cast<size_t>(j) * d;
      float dot = 0;
      for (int c = 0; c < d; ++c) dot += qh[c] * r[c];
      t.scores[j] = dot * s.scale;
    }
    Softmax(t.scores.data(), n);
    float* oh = out + (row * s.num_heads + h) * d;
    std::fill(oh, oh + d, 0.0f);
    for (int j = 0; j < n; ++j) {
      const float* r = t.rows.data() + static_cast<size_t>(j) * d;
      const float pj = t.scores[j];
      for (int c = 0; c < d; ++c) oh[c] += pj * r[c];
    }
  }
}

}  // namespace

void HybridAttention(const HybridAttentionShape& s, const tensor::PagedKvView& window,
                     int window_slot, const tensor::PagedLatentView* latent, int latent_slot,
                     std::span<const HybridSequence> seqs, const float* q, const float* q_idx,
                     const float* idx_w, float* out, ThreadPool& pool,
                     HybridAttentionScratch& scratch) {
  CHECK_EQ(window.row_elems, s.head_dim);
  CHECK_GE(scratch.num_threads(), pool.num_threads());
  CHECK(s.ratio == 0 || latent != nullptr);
  int64_t total = 0;
  for (const HybridSequence& seq : seqs) {
    CHECK_LE(seq.start_pos + seq.num_tokens, scratch.max_context_tokens());
    total += seq.num_tokens;
  }
  pool.ParallelFor(static_cast<size_t>(total), [&](size_t begin, size_t end, int thread) {
    size_t seq_index = 0;
    int64_t seq_end = seqs.empty() ? 0 : seqs[0].num_tokens;
    int64_t seq_begin = 0;
    for (size_t r = begin; r < end; ++r) {
      while (static_cast<int64_t>(r) >= seq_end) {
        seq_begin = seq_end;
        seq_end += seqs[++seq_index].num_tokens;
      }
      const HybridSequence& seq = seqs[seq_index];
      AttendRow(s, window, window_slot, latent, latent_slot, seq,
                static_cast<int32_t>(static_cast<int64_t>(r) - seq_begin), q, q_idx, idx_w, out,
                scratch.thread(thread));
    }
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
