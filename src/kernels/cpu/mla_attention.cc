#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::kernels {

MlaScratch::MlaScratch(const MlaShape& shape, int32_t max_context_tokens, int num_threads)
    : max_context_tokens_(max_context_tokens), threads_(std::max(1, num_threads)) {
  const size_t tile_heads = static_cast<size_t>(kQueryTile) * shape.num_heads;
  for (Thread& t : threads_) {
    t.rows.resize(static_cast<size_t>(kKeyChunk) * shape.latent_dim());
    t.scores.resize(kKeyChunk);
    t.acc.resize(tile_heads * shape.kv_lora_rank);
    t.max.resize(tile_heads);
    t.sum.resize(tile_heads);
  }
}

float LaneDot(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  for (int64_t c = 0; c < n; c += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += a[c + l] * b[c + l];
  }
  for (int w = 8; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] = lane[l] + lane[l + w];
  }
  return lane[0];
}

void WriteLatentRows(const tensor::PagedLatentView& latent, int layer,
                     std::span<const AttentionSequence> seqs, const float* rows, ThreadPool& pool) {
  CHECK_EQ(latent.compress_ratio, 1);
  const int64_t elems = latent.latent_elems;
  pool.ParallelFor(seqs.size(), [&](size_t begin, size_t end, int) {
    for (size_t s = begin; s < end; ++s) {
      const AttentionSequence& seq = seqs[s];
      for (int32_t i = 0; i < seq.num_tokens; ++i) {
        const int32_t pos = seq.start_pos + i;
        std::byte* dst = latent.LatentRow(layer, seq.block_table[pos / latent.block_size],
                                          pos % latent.block_size);
        tensor::QuantizeRow(latent.latent_dtype, rows + (seq.first_row + i) * elems, dst, elems);
      }
    }
  });
}

namespace {

// Builds the step's work items: each sequence's rows in tiles of kQueryTile, heads split so
// there are about 2 items per thread when the batch alone gives fewer.
void BuildItems(const MlaShape& shape, std::span<const AttentionSequence> seqs, int num_threads,
                std::vector<MlaScratch::Item>& items) {
  items.clear();
  int64_t tiles = 0;
  for (const AttentionSequence& s : seqs)
    tiles += (s.num_tokens + MlaScratch::kQueryTile - 1) / MlaScratch::kQueryTile;
  const int64_t want = 2 * static_cast<int64_t>(num_threads);
  const int splits = static_cast<int>(
      std::clamp<int64_t>((want + tiles - 1) / std::max<int64_t>(tiles, 1), 1, shape.num_heads));
  const int per = (shape.num_heads + splits - 1) / splits;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t first = 0; first < seqs[s].num_tokens; first += MlaScratch::kQueryTile) {
      const int32_t count = std::min(MlaScratch::kQueryTile, seqs[s].num_tokens - first);
      for (int h = 0; h < shape.num_heads; h += per) {
        items.push_back(
            {static_cast<int32_t>(s), first, count, h, std::min(per, shape.num_heads - h)});
      }
    }
  }
}

void RunItem(const MlaShape& shape, const tensor::PagedLatentView& latent, int layer,
             const AttentionSequence& seq, const MlaScratch::Item& item, const float* q, float* out,
             MlaScratch::Thread& t) {
  const int D = shape.latent_dim();
  const int R = shape.kv_lora_rank;
  const int H = shape.num_heads;
  const int n_q = item.count * item.heads;
  std::fill_n(t.max.data(), n_q, -std::numeric_limits<float>::infinity());
  std::fill_n(t.sum.data(), n_q, 0.0f);
  std::fill_n(t.acc.data(), static_cast<size_t>(n_q) * R, 0.0f);
  const int32_t first_pos = seq.start_pos + item.first;
  const int32_t last_pos = first_pos + item.count - 1;
  for (int32_t lo = 0; lo <= last_pos; lo += MlaScratch::kKeyChunk) {
    const int32_t hi = std::min(lo + MlaScratch::kKeyChunk, last_pos + 1);
    for (int32_t p = lo; p < hi; ++p) {
      const std::byte* src =
          latent.LatentRow(layer, seq.block_table[p / latent.block_size], p % latent.block_size);
      tensor::DequantizeRow(latent.latent_dtype, src, t.rows.data() + (p - lo) * D, D);
    }
    for (int32_t qi = 0; qi < item.count; ++qi) {
      const int32_t pos = first_pos + qi;
      if (pos < lo) continue;
      const int n_vis = std::min(hi, pos + 1) - lo;
      const int64_t row = seq.first_row + item.first + qi;
      for (int hh = 0; hh < item.heads; ++hh) {
        const int h = item.head + hh;
        const float* qh = q + (row * H + h) * D;
        const int k = qi * item.heads + hh;
        float m = t.max[k];
        for (int j = 0; j < n_vis; ++j) {
          t.scores[j] = shape.scale * LaneDot(qh, t.rows.data() + j * D, D);
          m = std::max(m, t.scores[j]);
        }
        const float a = std::exp(t.max[k] - m);
        float psum = 0.0f;
        for (int j = 0; j < n_vis; ++j) {
          t.scores[j] = std::exp(t.scores[j] - m);
          psum += t.scores[j];
        }
        t.sum[k] = t.sum[k] * a + psum;
        t.max[k] = m;
        float* acc = t.acc.data() + static_cast<size_t>(k) * R;
        for (int d = 0; d < R; ++d) acc[d] *= a;
        for (int j = 0; j < n_vis; ++j) {
          const float pj = t.scores[j];
          const float* v = t.rows.data() + j * D;
          for (int d = 0; d < R; ++d) acc[d] += pj * v[d];
        }
      }
    }
  }
  for (int32_t qi = 0; qi < item.count; ++qi) {
    const int64_t row = seq.first_row + item.first + qi;
    for (int hh = 0; hh < item.heads; ++hh) {
      const int k = qi * item.heads + hh;
      const float inv = 1.0f / t.sum[k];
      const float* acc = t.acc.data() + static_cast<size_t>(k) * R;
      float* o = out + (row * H + item.head + hh) * R;
      for (int d = 0; d < R; ++d) o[d] = acc[d] * inv;
    }
  }
}

}  // namespace

void MlaAttention(const MlaShape& shape, const tensor::PagedLatentView& latent, int layer,
                  std::span<const AttentionSequence> seqs, const float* q, float* out,
                  ThreadPool& pool, MlaScratch& scratch) {
  CHECK_EQ(latent.latent_elems, shape.latent_dim());
  CHECK_EQ(latent.compress_ratio, 1);
  CHECK_EQ(shape.latent_dim() % 16, 0);
  CHECK_LE(pool.num_threads(), scratch.num_threads());
  for (const AttentionSequence& s : seqs) {
    CHECK_LE(s.start_pos + s.num_tokens, scratch.max_context_tokens());
  }
  std::vector<MlaScratch::Item>& items = scratch.items();
  BuildItems(shape, seqs, pool.num_threads(), items);
  pool.ParallelFor(items.size(), [&](size_t begin, size_t end, int thread) {
    for (size_t i = begin; i < end; ++i) {
      RunItem(shape, latent, layer, seqs[items[i].seq], items[i], q, out, scratch.thread(thread));
    }
  });
}

}  // namespace kvserve::kernels
