#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/kv_dequant.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

// The largest BlockElems of any DType (Q8_0, Q4_0, FP8/FP4 with E8M0 scales: 32).
constexpr int64_t kMaxBlockElems = 32;
constexpr int kLanes = 16;
constexpr int kQueryTile = AttentionScratch::kQueryTile;
constexpr int kKeyChunk = AttentionScratch::kKeyChunk;

// The sequence that owns batch row `row`. note: seqs are contiguous in rows, in order.
const AttentionSequence& SequenceOfRow(std::span<const AttentionSequence> seqs, int64_t row) {
  auto it = std::upper_bound(seqs.begin(), seqs.end(), row,
                             [](int64_t r, const AttentionSequence& s) { return r < s.first_row; });
  DCHECK(it != seqs.begin());
  return *(it - 1);
}

int64_t TotalRows(std::span<const AttentionSequence> seqs) {
  int64_t rows = 0;
  for (const AttentionSequence& s : seqs) {
    CHECK_EQ(s.first_row, rows) << "sequences must be contiguous and in row order";
    CHECK_GE(s.start_pos, 0);
    rows += s.num_tokens;
  }
  return rows;
}

// 16-lane dot product of two zero-padded vectors (n a multiple of 16): lane l sums a[c] * b[c]
// over c = l, l + 16, ... in order; lanes are then summed by halving (l += l + 8, l += l + 4,
// l += l + 2, l += l + 1).
inline __attribute__((always_inline)) float Dot16(const float* a, const float* b, int n) {
  float lanes[kLanes] = {};
  for (int c = 0; c < n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[c + l] * b[c + l];
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time; all
// three compute the same bits (lanes are independent, and -ffp-contract=off forbids fusing).
#if defined(__x86_64__) && !defined(__clang__)
#define KVSERVE_ATTENTION_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVSERVE_ATTENTION_CLONES
#endif

// One online-softmax step of one query head over keys [a, b) of the current chunk: key j at
// keys + j * key_stride (padded_hd floats, zero-padded), value j at values + j * value_stride
// (hd floats). q: (padded_hd); acc: (hd); max/sum: the running state (see attention.h).
KVSERVE_ATTENTION_CLONES void UpdateQuery(const float* q, const float* keys, int64_t key_stride,
                                          const float* values, int64_t value_stride, int a, int b,
                                          int hd, int padded_hd, float scale, float softcap,
                                          float* acc, float& max, float& sum) {
  float s[kKeyChunk];
  float chunk_max = -std::numeric_limits<float>::infinity();
  for (int j = a; j < b; ++j) {
    s[j] = scale * Dot16(q, keys + j * key_stride, padded_hd);
    if (softcap > 0.0f) s[j] = softcap * std::tanh(s[j] / softcap);
    chunk_max = std::max(chunk_max, s[j]);
  }
  const float new_max = std::max(max, chunk_max);
  const float alpha = std::exp(max - new_max);  // 0 on the first chunk (max = -inf)
  float chunk_sum = 0.0f;
  for (int j = a; j < b; ++j) {
    s[j] = std::exp(s[j] - new_max);
    chunk_sum += s[j];
  }
  sum = sum * alpha + chunk_sum;
  max = new_max;
  for (int d = 0; d < hd; ++d) acc[d] *= alpha;
  for (int j = a; j < b; ++j) {
    const float p = s[j];
    const float* v = values + j * value_stride;
    for (int d = 0; d < hd; ++d) acc[d] += p * v[d];
  }
}

int32_t WindowStart(const AttentionShape& shape, int32_t pos) {
  return shape.window ? std::max<int32_t>(0, pos - *shape.window + 1) : 0;
}

// Dequantizes K and V of positions [lo, hi) (inside chunk c0) for kv heads [h0, h0 + heads)
// into t: key j, head h at t.keys + (j - c0) * heads * padded_hd + h * padded_hd, value at
// t.values + ((j - c0) * heads + h) * hd. One contiguous slice per stored row, so a decode
// that attends with all heads streams whole rows instead of 64-value pieces of them.
void LoadChunk(const tensor::PagedKvView& kv, int layer, const AttentionSequence& seq, int h0,
               int heads, int hd, int padded_hd, int32_t c0, int32_t lo, int32_t hi,
               AttentionScratch::Thread& t) {
  const std::byte* k_rows[kKeyChunk];
  const std::byte* v_rows[kKeyChunk];
  for (int32_t j = lo; j < hi; ++j) {
    CHECK_LT(static_cast<size_t>(j / kv.block_size), seq.block_table.size())
        << "block table does not cover position " << j;
    const int32_t block = seq.block_table[j / kv.block_size];
    const int slot = j % kv.block_size;
    k_rows[j - lo] = kv.KRow(layer, block, slot);
    v_rows[j - lo] = kv.VRow(layer, block, slot);
  }
  const int64_t first = static_cast<int64_t>(h0) * hd;
  const int64_t count = static_cast<int64_t>(heads) * hd;
  const int64_t key_stride = static_cast<int64_t>(heads) * padded_hd;
  float* keys = t.keys + (lo - c0) * key_stride;
  if (padded_hd == hd) {
    DequantizeKvSlices(kv.dtype, k_rows, hi - lo, first, count, keys, key_stride, t.staging);
  } else {  // head_dim not a multiple of 16: widen each head to its zero-padded place
    DequantizeKvSlices(kv.dtype, k_rows, hi - lo, first, count, t.rows, count, t.staging);
    for (int32_t j = 0; j < hi - lo; ++j) {
      for (int h = 0; h < heads; ++h) {
        std::memcpy(keys + j * key_stride + h * padded_hd, t.rows + j * count + h * hd,
                    sizeof(float) * hd);
      }
    }
  }
  DequantizeKvSlices(kv.dtype, v_rows, hi - lo, first, count, t.values + (lo - c0) * count, count,
                     t.staging);
}

// Prefetches the K/V slices [first, first + count) of positions [lo, hi): issued for the next
// chunk while the current one is computed, so its memory latency overlaps arithmetic (a
// chunk's rows sit in a block of their own, where the hardware's streams restart).
void PrefetchChunk(const tensor::PagedKvView& kv, int layer, const AttentionSequence& seq,
                   int64_t first, int64_t count, int32_t lo, int32_t hi) {
  const int64_t block_elems = tensor::BlockElems(kv.dtype);
  const int64_t block_lo = first / block_elems;
  const int64_t block_hi = (first + count + block_elems - 1) / block_elems;
  const int64_t offset = block_lo * tensor::BlockBytes(kv.dtype);
  const int64_t bytes = (block_hi - block_lo) * tensor::BlockBytes(kv.dtype);
  for (int32_t j = lo; j < hi; ++j) {
    const size_t entry = static_cast<size_t>(j / kv.block_size);
    if (entry >= seq.block_table.size()) return;
    const int32_t block = seq.block_table[entry];
    const int slot = j % kv.block_size;
    const auto* k = reinterpret_cast<const char*>(kv.KRow(layer, block, slot)) + offset;
    const auto* v = reinterpret_cast<const char*>(kv.VRow(layer, block, slot)) + offset;
    for (int64_t b = 0; b < bytes; b += 64) {
      __builtin_prefetch(k + b);
      __builtin_prefetch(v + b);
    }
  }
}

// One work item: every query head of kv heads [item.kv_head, + item.kv_heads) for item.count
// consecutive rows of a sequence. Query (r, h, g) (row, kv head in the item, head in its
// group) is at index (r * heads + h) * group + g.
void AttendItem(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
                const AttentionSequence& seq, const AttentionScratch::Item& item, int padded_hd,
                const float* q, float* out, AttentionScratch::Thread& t) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const int heads = item.kv_heads;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * hd;
  const int64_t head_offset = static_cast<int64_t>(item.kv_head) * group * hd;
  const int64_t row0 = seq.first_row + item.first;
  const int32_t pos0 = seq.start_pos + item.first;
  const int32_t last = pos0 + item.count - 1;
  const int per_row = heads * group;
  const int num_queries = item.count * per_row;
  for (int r = 0; r < item.count; ++r) {
    const float* src = q + (row0 + r) * q_stride + head_offset;
    for (int i = 0; i < per_row; ++i) {
      std::memcpy(t.queries + static_cast<int64_t>(r * per_row + i) * padded_hd, src + i * hd,
                  sizeof(float) * hd);
    }
  }
  std::fill(t.acc, t.acc + static_cast<int64_t>(num_queries) * hd, 0.0f);
  std::fill(t.max, t.max + num_queries, -std::numeric_limits<float>::infinity());
  std::fill(t.sum, t.sum + num_queries, 0.0f);
  const int64_t key_stride = static_cast<int64_t>(heads) * padded_hd;
  const int64_t value_stride = static_cast<int64_t>(heads) * hd;
  const int32_t first_key = WindowStart(shape, pos0);
  for (int32_t c0 = first_key / kKeyChunk * kKeyChunk; c0 <= last; c0 += kKeyChunk) {
    const int32_t chunk_end = std::min(c0 + kKeyChunk, last + 1);
    LoadChunk(kv, layer, seq, item.kv_head, heads, hd, padded_hd, c0, std::max(c0, first_key),
              chunk_end, t);
    if (chunk_end <= last) {
      PrefetchChunk(kv, layer, seq, static_cast<int64_t>(item.kv_head) * hd,
                    static_cast<int64_t>(heads) * hd, chunk_end,
                    std::min(chunk_end + kKeyChunk, last + 1));
    }
    for (int r = 0; r < item.count; ++r) {
      const int32_t pos = pos0 + r;
      const int a = std::max(c0, WindowStart(shape, pos)) - c0;
      const int b = std::min(c0 + kKeyChunk, pos + 1) - c0;
      if (a >= b) continue;
      for (int h = 0; h < heads; ++h) {
        for (int g = 0; g < group; ++g) {
          const int i = r * per_row + h * group + g;
          UpdateQuery(t.queries + static_cast<int64_t>(i) * padded_hd, t.keys + h * padded_hd,
                      key_stride, t.values + h * hd, value_stride, a, b, hd, padded_hd, shape.scale,
                      shape.softcap.value_or(0.0f), t.acc + static_cast<int64_t>(i) * hd, t.max[i],
                      t.sum[i]);
        }
      }
    }
  }
  for (int r = 0; r < item.count; ++r) {
    float* dst = out + (row0 + r) * q_stride + head_offset;
    for (int i = 0; i < per_row; ++i) {
      const int qi = r * per_row + i;
      const float inv = 1.0f / t.sum[qi];
      const float* a = t.acc + static_cast<int64_t>(qi) * hd;
      for (int d = 0; d < hd; ++d) dst[i * hd + d] = a[d] * inv;
    }
  }
}

// Work items of a step, the most expensive (latest tiles of the longest contexts) first, so
// that dynamic claiming ends with the cheap ones. Every (row, kv head) is covered once. An
// item takes as many kv heads as leaves ~4 items per thread: all heads when there are many
// sequences or tiles (whole K/V rows are read contiguously), single heads for one decode.
// The grouping changes no result: each query head's arithmetic is the same in any item.
void BuildItems(const AttentionShape& shape, std::span<const AttentionSequence> seqs,
                int num_threads, std::vector<AttentionScratch::Item>& items) {
  items.clear();
  int64_t tiles = 0;
  for (const AttentionSequence& s : seqs) tiles += (s.num_tokens + kQueryTile - 1) / kQueryTile;
  const int64_t kv_heads = shape.num_kv_heads;
  const int64_t groups =
      std::clamp<int64_t>((4 * num_threads + tiles - 1) / std::max<int64_t>(tiles, 1), 1, kv_heads);
  const int heads_per_item = static_cast<int>((kv_heads + groups - 1) / groups);
  for (int32_t s = 0; s < static_cast<int32_t>(seqs.size()); ++s) {
    for (int32_t first = 0; first < seqs[s].num_tokens; first += kQueryTile) {
      const int32_t count = std::min(kQueryTile, seqs[s].num_tokens - first);
      for (int h = 0; h < shape.num_kv_heads; h += heads_per_item) {
        items.push_back({s, first, count, h, std::min(heads_per_item, shape.num_kv_heads - h)});
      }
    }
  }
  auto cost = [&](const AttentionScratch::Item& it) {
    const int32_t last = seqs[it.seq].start_pos + it.first + it.count - 1;
    return static_cast<int64_t>(last - WindowStart(shape, seqs[it.seq].start_pos + it.first)) *
           it.count * it.kv_heads;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const auto& x, const auto& y) { return cost(x) > cost(y); });
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens,
                                   int num_threads)
    : max_context_tokens_(max_context_tokens), num_threads_(num_threads) {
  CHECK_GT(shape.num_kv_heads, 0);
  CHECK_EQ(shape.num_heads % shape.num_kv_heads, 0);
  CHECK_GE(num_threads, 1);
  const int64_t heads = shape.num_heads;
  const int64_t kv_heads = shape.num_kv_heads;
  const int64_t hd = shape.head_dim;
  padded_head_dim_ = static_cast<int>((hd + kLanes - 1) / kLanes * kLanes);
  const int64_t row = kv_heads * hd;
  // keys, values, staging, rows (only for padded heads), queries, acc, max, sum
  const int64_t sizes[kBuffers] = {kKeyChunk * kv_heads * padded_head_dim_,
                                   kKeyChunk * row,
                                   row + 2 * kMaxBlockElems,
                                   padded_head_dim_ == hd ? 0 : kKeyChunk * row,
                                   kQueryTile * heads * padded_head_dim_,
                                   kQueryTile * heads * hd,
                                   kQueryTile * heads,
                                   kQueryTile * heads};
  floats_per_thread_ = 0;
  for (int i = 0; i < kBuffers; ++i) {
    offsets_[i] = floats_per_thread_;
    floats_per_thread_ += (sizes[i] + 15) / 16 * 16;  // 64-byte multiples
  }
  buffer_.assign(static_cast<size_t>(floats_per_thread_ * num_threads), 0.0f);
}

AttentionScratch::Thread AttentionScratch::ForThread(int t) {
  CHECK(t >= 0 && t < num_threads_);
  float* base = buffer_.data() + t * floats_per_thread_;
  return {base + offsets_[0], base + offsets_[1], base + offsets_[2], base + offsets_[3],
          base + offsets_[4], base + offsets_[5], base + offsets_[6], base + offsets_[7]};
}

void WriteKv(const tensor::PagedKvView& kv, int layer, std::span<const AttentionSequence> seqs,
             const float* k, const float* v, ThreadPool& pool) {
  const int64_t rows = TotalRows(seqs);
  pool.ParallelFor(static_cast<size_t>(rows), [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) {
      const AttentionSequence& seq = SequenceOfRow(seqs, static_cast<int64_t>(r));
      const int32_t pos = seq.start_pos + static_cast<int32_t>(r - seq.first_row);
      CHECK_LT(static_cast<size_t>(pos / kv.block_size), seq.block_table.size())
          << "block table does not cover position " << pos;
      const int32_t block = seq.block_table[pos / kv.block_size];
      const int slot = pos % kv.block_size;
      const int64_t offset = static_cast<int64_t>(r) * kv.row_elems;
      tensor::QuantizeRow(kv.dtype, k + offset, kv.KRow(layer, block, slot), kv.row_elems);
      tensor::QuantizeRow(kv.dtype, v + offset, kv.VRow(layer, block, slot), kv.row_elems);
    }
  });
}

void PagedAttention(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
                    std::span<const AttentionSequence> seqs, const float* q, float* out,
                    ThreadPool& pool, AttentionScratch& scratch) {
  CHECK_EQ(kv.row_elems, shape.num_kv_heads * shape.head_dim);
  CHECK_EQ(shape.num_heads % shape.num_kv_heads, 0);
  CHECK_GE(scratch.num_threads(), pool.num_threads());
  CHECK(!shape.window || *shape.window > 0) << "window must be positive";
  CHECK(!shape.softcap || *shape.softcap > 0.0f) << "softcap must be positive";
  TotalRows(seqs);
  for (const AttentionSequence& s : seqs) {
    CHECK_LE(s.start_pos + s.num_tokens, scratch.max_context_tokens())
        << "attention scratch too small";
  }
  BuildItems(shape, seqs, pool.num_threads(), scratch.items());
  // Everything the threads need behind one pointer, so the std::function that ParallelFor
  // takes stays in its small-object buffer (no allocation per call).
  struct Call {
    const AttentionShape* shape;
    const tensor::PagedKvView* kv;
    int layer;
    std::span<const AttentionSequence> seqs;
    const float* q;
    float* out;
    AttentionScratch* scratch;
    std::atomic<size_t> next{0};  // first unclaimed item
  } call{&shape, &kv, layer, seqs, q, out, &scratch};
  const auto attend = [c = &call](size_t, size_t, int thread) {
    AttentionScratch::Thread t = c->scratch->ForThread(thread);
    const std::vector<AttentionScratch::Item>& items = c->scratch->items();
    const int padded_hd = c->scratch->padded_head_dim();
    for (size_t i; (i = c->next.fetch_add(1, std::memory_order_relaxed)) < items.size();) {
      const AttentionScratch::Item& item = items[i];
      AttendItem(*c->shape, *c->kv, c->layer, c->seqs[item.seq], item, padded_hd, c->q, c->out, t);
    }
  };
  pool.ParallelFor(static_cast<size_t>(pool.num_threads()), attend);
}

}  // namespace kvserve::kernels
