// Per-target attention work items (included by attention.cc once per Highway target): the
// walk over partitions and chunks of one item, the fold of split sequences, and the worker
// loop that claims items.
#if defined(KVSERVE_KERNELS_CPU_ATTENTION_ITEM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_ATTENTION_ITEM_INL_H_
#undef KVSERVE_KERNELS_CPU_ATTENTION_ITEM_INL_H_
#else
#define KVSERVE_KERNELS_CPU_ATTENTION_ITEM_INL_H_
#endif

#include <type_traits>

#include "kernels/cpu/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {

constexpr int32_t kPrefetchChunks = 4;  // chunks of K/V requested ahead of the one computed
// A decode walk (DecodeHeads) requests its (chunk, head) steps' K/V into L2 kDecodeFarSteps
// steps ahead and into L1 kDecodeNearSteps ahead: the L1's few miss buffers then wait on L2
// hits, not on memory (prefetching 4 steps ahead into L1 alone streamed 11-21% slower from
// memory on AMD Zen 5, docs/PERFORMANCE.md). The requests are spread over each step's
// arithmetic (DecodeHeads), not issued as one burst before it.
constexpr int kDecodeNearSteps = 1;
constexpr int kDecodeFarSteps = 16;
constexpr int kTransposeMinQueries = 4;  // queries of an item from which key tiles are transposed
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kInPlaceKv = true;  // F16 K/V read in place (AttendItem) on AVX-512
#else
constexpr bool kInPlaceKv = false;
#endif

// Queries (r, j) of an item (row r of the tile, query head j of the item's kv heads: kv head
// kv_head + j / group, query head (kv_head * group + j) of the row) are numbered
// r * heads * group + j; their vectors sit at t.queries + i * padded_hd, zero-padded.
HWY_INLINE void LoadQueries(const internal::AttentionCall& c, const AttentionSequence& seq,
                            const AttentionScratch::Item& item, int padded_hd, float* queries) {
  const AttentionShape& shape = *c.shape;
  const int per_row = item.heads * (shape.num_heads / shape.num_kv_heads);
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  for (int r = 0; r < item.count; ++r) {
    const float* row = c.q + (seq.first_row + item.first + r) * q_stride +
                       static_cast<int64_t>(item.kv_head) * (q_stride / shape.num_kv_heads);
    for (int j = 0; j < per_row; ++j) {
      std::memcpy(queries + static_cast<int64_t>(r * per_row + j) * padded_hd,
                  row + j * shape.head_dim, sizeof(float) * shape.head_dim);
    }
  }
}

// Writes the finished states (one per query of the item, numbered as in LoadQueries) of
// `count` rows from `first` and kv heads [kv_head, kv_head + heads) to the output rows.
HWY_INLINE void StoreOutputs(const internal::AttentionCall& c, const AttentionSequence& seq,
                             int32_t first, int32_t count, int kv_head, int heads,
                             const float* states, int state_floats, int padded_hd) {
  const AttentionShape& shape = *c.shape;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int per_row = heads * group;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  for (int r = 0; r < count; ++r) {
    float* row = c.out + (seq.first_row + first + r) * q_stride +
                 static_cast<int64_t>(kv_head) * group * shape.head_dim;
    for (int j = 0; j < per_row; ++j) {
      const float* sink = shape.sinks != nullptr ? shape.sinks + kv_head * group + j : nullptr;
      Finalize(states + static_cast<int64_t>(r * per_row + j) * state_floats,
               internal::ValueDim(shape), padded_hd, row + j * shape.head_dim, sink);
    }
  }
}

// Folds a split sequence's partition states in order and writes its outputs. Runs on the
// thread that finished the split's last item.
HWY_INLINE void FoldSplit(const internal::AttentionCall& c, const AttentionScratch::Split& split,
                          AttentionScratch::Thread& t) {
  const AttentionSequence& seq = c.seqs[split.seq];
  const int group = c.shape->num_heads / c.shape->num_kv_heads;
  const int queries = seq.num_tokens * group;
  const int sf = c.scratch->state_floats();
  const int padded_hd = c.scratch->padded_head_dim();
  const int padded_vd = internal::PaddedValueDim(*c.shape, padded_hd);
  ResetStates(t.total, queries, sf, padded_hd);
  for (int32_t k = 0; k < split.part_end - split.part_begin; ++k) {
    const float* states = c.split_states + (split.first_state + int64_t{k} * queries) * sf;
    for (int i = 0; i < queries; ++i) {
      const float* part = states + static_cast<int64_t>(i) * sf;
      if (part[padded_hd + kLanes] != kNegInf) {
        Merge(t.total + int64_t{i} * sf, part, padded_hd, padded_vd);
      }
    }
  }
  StoreOutputs(c, seq, 0, seq.num_tokens, split.kv_head, 1, t.total, sf, padded_hd);
}

// Runs the queries of one kv head (its item queries first_query + r * per_row + g, g < group)
// through the chunk at c0, visible keys [lo, hi), in fours of the same visible keys [a, b)
// (all of a row's GQA group, and all rows whose window covers the chunk, share them).
template <typename T>
HWY_INLINE void UpdateHead(const internal::AttentionCall& c, const AttentionScratch::Item& item,
                           AttentionScratch::Thread& t, float* states, int first_query,
                           const T* keys, const float* kt, const T* values, int32_t c0,
                           int32_t lo, int32_t hi) {
  const AttentionShape& shape = *c.shape;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int per_row = item.heads * group;
  const int padded_hd = c.scratch->padded_head_dim();
  const int sf = c.scratch->state_floats();
  const float softcap = shape.softcap.value_or(0.0f);
  const int padded_vd = internal::PaddedValueDim(shape, padded_hd);
  const int32_t pos0 = c.seqs[item.seq].start_pos + item.first;
  const float* qs[4];
  float* ss[4];
  int n = 0;
  int batch_a = 0, batch_b = 0;
  auto flush = [&] {
    switch (n) {
      case 4: UpdateChunks<4>(qs, ss, keys, kt, values, padded_hd, shape.scale, batch_a, batch_b, softcap, padded_vd); break;
      case 3: UpdateChunks<3>(qs, ss, keys, kt, values, padded_hd, shape.scale, batch_a, batch_b, softcap, padded_vd); break;
      case 2: UpdateChunks<2>(qs, ss, keys, kt, values, padded_hd, shape.scale, batch_a, batch_b, softcap, padded_vd); break;
      case 1: UpdateChunks<1>(qs, ss, keys, kt, values, padded_hd, shape.scale, batch_a, batch_b, softcap, padded_vd); break;
      default: break;
    }
    n = 0;
  };
  for (int r = 0; r < item.count; ++r) {
    const int32_t pos = pos0 + r;
    const int a = std::max(lo, internal::WindowStart(shape, pos)) - c0;
    const int b = std::min(hi, pos + 1) - c0;
    if (a >= b) continue;
    for (int g = 0; g < group; ++g) {
      if (n > 0 && (a != batch_a || b != batch_b)) flush();
      const int i = first_query + r * per_row + g;
      qs[n] = t.queries + static_cast<int64_t>(i) * padded_hd;
      ss[n] = states + static_cast<int64_t>(i) * sf;
      batch_a = a;
      batch_b = b;
      if (++n == 4) flush();
    }
  }
  flush();
}

// The prefetch of a decode walk (DecodeHeads): a cursor over its (chunk, head) steps, in walk
// order, that requests each step's K and V (the head's 16 slots: one run each, the chunk lies
// in one block), a line of K and the same line of V at a time. Lines(n) requests the next n
// of those line pairs (a step has lines() of them); kHint 0 into L1 (prefetcht0), 1 into L2
// (prefetcht1).
struct DecodePrefetch {
  DecodePrefetch(const tensor::PagedKvView& kv, int layer, std::span<const int32_t> table,
                 int kv_head, int heads, int32_t end, int32_t c0)
      : kv_(&kv), layer_(layer), table_(table), kv_head_(kv_head), heads_(heads), end_(end),
        c0_(c0), lines_(static_cast<int>((kChunk * kv.segment_bytes + 63) / 64)),
        head_stride_(static_cast<size_t>(kv.block_size) * kv.segment_bytes) {
    if (c0_ < end_) Seek();
  }

  int lines() const { return lines_; }

  template <int kHint>
  void Lines(int n) {
    while (n > 0 && c0_ < end_) {
      const int stop = std::min(lines_, line_ + n);
      n -= stop - line_;
      for (; line_ < stop; ++line_) {
        PrefetchLine<kHint>(k_ + 64 * line_);
        PrefetchLine<kHint>(v_ + 64 * line_);
      }
      if (line_ < lines_) return;
      line_ = 0;
      k_ += head_stride_;
      v_ += head_stride_;
      if (++h_ == heads_) {
        h_ = 0;
        c0_ += kChunk;
        if (c0_ < end_) Seek();
      }
    }
  }

 private:
  void Seek() {  // k_, v_: the first head's K and V of the chunk at c0_
    const int32_t block = table_[c0_ / kv_->block_size];
    const int slot = c0_ % kv_->block_size;
    k_ = reinterpret_cast<const char*>(kv_->KSegment(layer_, block, slot, kv_head_));
    v_ = reinterpret_cast<const char*>(kv_->VSegment(layer_, block, slot, kv_head_));
  }

  const tensor::PagedKvView* kv_;
  int layer_;
  std::span<const int32_t> table_;
  int kv_head_;
  int heads_;
  int32_t end_;   // positions past the walk
  int32_t c0_;    // the chunk of the next step
  int h_ = 0;     // its head, from kv_head_
  int lines_;     // line pairs of a step: a head's K (and V) of one chunk, in cache lines
  int line_ = 0;  // the next one in the step
  size_t head_stride_;
  const char* k_ = nullptr;  // the next step's K and V
  const char* v_ = nullptr;
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// A decode row (item.count == 1) through the chunk at c0 (visible keys [lo, hi)) for item
// heads [h0, h0 + n), n <= 4 / kG, their F16 K/V read in place from the block at `slot`:
// UpdateHeadsF16 on up to 4 queries at once (kG: the GQA group). The walk's prefetches for
// these n steps (n * lines() line pairs per cursor) are spread over the step's loops, a slice
// before each head's scores and every 4 value rows (n + 4 slices), instead of one burst before
// it: a burst of 2 x 64 lines per step fills the miss queues and the reorder buffer with
// prefetches that wait, so the arithmetic behind them waited too.
template <int kG, int kDims>
HWY_INLINE void DecodeHeads(const internal::AttentionCall& c, const AttentionScratch::Item& item,
                            AttentionScratch::Thread& t, float* states, int32_t block, int slot,
                            int h0, int n, int a, int b, DecodePrefetch& near,
                            DecodePrefetch& far) {
  const tensor::PagedKvView& kv = *c.kv;
  const int sf = c.scratch->state_floats();
  const float softcap = c.shape->softcap.value_or(0.0f);
  const int padded_vd = internal::PaddedValueDim(*c.shape, kDims);
  const float* qs[4];
  float* ss[4];
  const uint16_t* ks[4];
  const uint16_t* vs[4];
  for (int h = 0; h < n; ++h) {
    const int head = item.kv_head + h0 + h;
    ks[h] = reinterpret_cast<const uint16_t*>(kv.KSegment(c.layer, block, slot, head));
    vs[h] = reinterpret_cast<const uint16_t*>(kv.VSegment(c.layer, block, slot, head));
    for (int g = 0; g < kG; ++g) {
      const int i = (h0 + h) * kG + g;
      qs[h * kG + g] = t.queries + static_cast<int64_t>(i) * kDims;
      ss[h * kG + g] = states + static_cast<int64_t>(i) * sf;
    }
  }
  const int total = n * near.lines();
  const int slices = n + 4;
  int sliced = 0;
  int issued = 0;
  auto tick = [&]() HWY_ATTR {
    const int target = total * ++sliced / slices;
    near.Lines<0>(target - issued);
    far.Lines<1>(target - issued);
    issued = target;
  };
  auto run = [&](auto heads) HWY_ATTR {
    UpdateHeadsF16<decltype(heads)::value, kG, kDims>(qs, ss, ks, vs, c.shape->scale, a, b,
                                                      softcap, padded_vd, tick);
  };
  switch (n) {
    case 4:
      if constexpr (kG == 1) run(std::integral_constant<int, 4>());
      break;
    case 3:
      if constexpr (kG == 1) run(std::integral_constant<int, 3>());
      break;
    case 2:
      if constexpr (kG <= 2) run(std::integral_constant<int, 2>());
      break;
    default:
      run(std::integral_constant<int, 1>());
      break;
  }
  near.Lines<0>(total - issued);  // the slices a chunk's hidden rows skipped
  far.Lines<1>(total - issued);
}

// DecodeHeads for the item's group and padded_hd. note: 1, 2 or 4 queries per kv head and 64
// or 128 dims (AttendItem's decode_heads > 0), the shapes with an instance.
HWY_INLINE void DecodeHeadsFor(int group, int padded_hd, const internal::AttentionCall& c,
                               const AttentionScratch::Item& item, AttentionScratch::Thread& t,
                               float* states, int32_t block, int slot, int h0, int n, int a,
                               int b, DecodePrefetch& near, DecodePrefetch& far) {
  switch (group * 1000 + padded_hd) {
    case 1064: return DecodeHeads<1, 64>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    case 2064: return DecodeHeads<2, 64>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    case 4064: return DecodeHeads<4, 64>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    case 1128: return DecodeHeads<1, 128>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    case 2128: return DecodeHeads<2, 128>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    case 4128: return DecodeHeads<4, 128>(c, item, t, states, block, slot, h0, n, a, b, near, far);
    default: CHECK(false) << "no DecodeHeads for group " << group << ", " << padded_hd << " dims";
  }
}
#endif

// One work item: every query of kv heads [item.kv_head, + item.heads) for item.count
// consecutive rows, over partitions [part_begin, part_end). Chunk by chunk, head by head (the
// order the K/V lie in a head-major block); each head's chunk of K/V is converted once for
// all its queries, unless at most 4 queries read it (a decode's GQA group): then F16 K/V are
// read in place on AVX-512 (measured faster on AMD Zen 5, docs/PERFORMANCE.md; on last
// session's Intel Xeon the conversion pass was faster while K/V streamed from memory).
HWY_INLINE void AttendItem(const internal::AttentionCall& c, const AttentionScratch::Item& item,
                           AttentionScratch::Thread& t) {
  const AttentionShape& shape = *c.shape;
  const tensor::PagedKvView& kv = *c.kv;
  const AttentionSequence& seq = c.seqs[item.seq];
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const int padded_hd = c.scratch->padded_head_dim();
  const int padded_vd = internal::PaddedValueDim(shape, padded_hd);
  const int sf = c.scratch->state_floats();
  const int queries = item.count * item.heads * group;
  const int32_t pos0 = seq.start_pos + item.first;
  const int32_t last = pos0 + item.count - 1;
  const int32_t first_key = internal::WindowStart(shape, pos0);
  const AttentionScratch::Split* split =
      item.split >= 0 ? &c.scratch->splits()[item.split] : nullptr;
  LoadQueries(c, seq, item, padded_hd, t.queries);
  // Transposing a chunk's keys costs about what it saves two queries' scores: worth it from
  // kTransposeMinQueries queries of a kv head on (prefill tiles, large GQA groups); not for a
  // lone decode, nor on AVX-512, whose ScoresTiled reads the rows (attention-inl.h).
  const float* kt =
      !kTiledScores && item.count * group >= kTransposeMinQueries ? t.keys : nullptr;
  const int32_t item_lo = std::max(item.part_begin * kPartition, first_key);
  const int32_t item_hi = std::min(item.part_end * kPartition, last + 1);
  const int32_t chunk_lo = item_lo / kChunk * kChunk;
  // Steps (chunk, head) in walk order: step s is kv head kv_head + s % heads of the chunk at
  // chunk_lo + s / heads * kChunk. The K/V of step s + kPrefetchChunks are requested at step s:
  // one head's keys of a block are only a short run (2 KiB at 64 f16 dims), too short for the
  // hardware prefetcher to ramp up.
  auto prefetch = [&](int64_t step) {
    const int32_t p0 = chunk_lo + static_cast<int32_t>(step / item.heads) * kChunk;
    if (p0 >= item_hi) return;
    PrefetchChunk(kv, c.layer, seq.block_table, item.kv_head + static_cast<int>(step % item.heads),
                  hd, std::max(p0, item_lo), std::min(p0 + kChunk, item_hi));
  };
  // K and V the same rows (MLA's latent, kernels/cpu/mla_attention.h): converted once.
  const bool shared_kv = kv.layers[c.layer].v_base == kv.layers[c.layer].k_base;
  float* values = shared_kv ? t.key_rows : t.values;
  // F16 K/V of whole-head segments read in place, with no f32 tile, when every query of a
  // head's chunk is in one UpdateChunks call (at most 4: each K/V value is widened once
  // either way). A chunk lies in one block (block_size a multiple of 16); its slots outside
  // [lo, hi) are read too, but their scores are masked and their values never used.
  const bool in_place = kInPlaceKv && kv.dtype == tensor::DType::kF16 &&
                        kv.segment_elems == hd && padded_hd == hd &&
                        kv.block_size % kChunk == 0 && item.count * group <= 4;
  // A decode row of 1, 2 or 4 queries per kv head at 64 or 128 dims: DecodeHeads, 4 / group
  // heads per call (0: head by head).
  [[maybe_unused]] const int decode_heads =
      in_place && item.count == 1 && (group == 1 || group == 2 || group == 4) &&
              (padded_hd == 64 || padded_hd == 128)
          ? 4 / group
          : 0;
  DecodePrefetch near(kv, c.layer, seq.block_table, item.kv_head, item.heads, item_hi,
                      chunk_lo);
  DecodePrefetch far = near;
  if (decode_heads > 0) {
    near.Lines<0>(kDecodeNearSteps * near.lines());
    far.Lines<1>(kDecodeFarSteps * far.lines());
  } else {
    for (int s = 0; s < kPrefetchChunks; ++s) prefetch(s);
  }
  if (!split) ResetStates(t.total, queries, sf, padded_hd);
  int64_t step = 0;
  for (int32_t part = item.part_begin; part < item.part_end; ++part) {
    float* states = split ? c.split_states + (split->first_state +
                                              int64_t{part - split->part_begin} * queries) * sf
                          : t.part;
    ResetStates(states, queries, sf, padded_hd);
    const int32_t key_lo = std::max(part * kPartition, first_key);
    const int32_t key_hi = std::min((part + 1) * kPartition, last + 1);
    for (int32_t c0 = key_lo / kChunk * kChunk; c0 < key_hi; c0 += kChunk) {
      const int32_t lo = std::max(c0, key_lo);
      const int32_t hi = std::min(c0 + kChunk, key_hi);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
      if (decode_heads > 0) {  // a decode row: up to 4 queries of decode_heads heads at once
        const int32_t block = seq.block_table[c0 / kv.block_size];
        const int slot = c0 % kv.block_size;
        const int a = std::max(lo, internal::WindowStart(shape, pos0)) - c0;
        const int b = std::min(hi, pos0 + 1) - c0;
        for (int h = 0; h < item.heads; h += decode_heads) {
          const int n = std::min(decode_heads, item.heads - h);
          if (a < b) {
            DecodeHeadsFor(group, padded_hd, c, item, t, states, block, slot, h, n, a, b, near,
                           far);
          } else {
            near.Lines<0>(n * near.lines());
            far.Lines<1>(n * far.lines());
          }
        }
        continue;
      }
#endif
      for (int h = 0; h < item.heads; ++h, ++step) {
        const int head = item.kv_head + h;
        prefetch(step + kPrefetchChunks);
        if constexpr (kInPlaceKv) {
          if (in_place) {
            const int32_t block = seq.block_table[c0 / kv.block_size];
            const int slot = c0 % kv.block_size;
            UpdateHead(c, item, t, states, h * group,
                       reinterpret_cast<const uint16_t*>(kv.KSegment(c.layer, block, slot, head)),
                       nullptr,
                       reinterpret_cast<const uint16_t*>(kv.VSegment(c.layer, block, slot, head)),
                       c0, lo, hi);
            continue;
          }
        }
        ConvertChunk(kv, c.layer, seq.block_table, head, hd, padded_hd, c0, lo, hi, t.key_rows,
                     shared_kv ? nullptr : t.values, t.staging);
        if (kt != nullptr) TransposeKeys(t.key_rows, padded_hd, hd, t.keys);
        UpdateHead<float>(c, item, t, states, h * group, t.key_rows, kt, values, c0, lo, hi);
      }
    }
    if (split) continue;
    for (int i = 0; i < queries; ++i) {
      const float* p = t.part + static_cast<int64_t>(i) * sf;
      if (p[padded_hd + kLanes] != kNegInf) {
        Merge(t.total + int64_t{i} * sf, p, padded_hd, padded_vd);
      }
    }
  }
  if (!split) {
    StoreOutputs(c, seq, item.first, item.count, item.kv_head, item.heads, t.total, sf,
                 padded_hd);
  } else if (c.split_counters[item.split].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    FoldSplit(c, *split, t);
  }
}

// A thread's share of a PagedAttention call: claims items until none is left.
void AttendWorker(internal::AttentionCall* c, int thread) {
  AttentionScratch::Thread t = c->scratch->ForThread(thread);
  const std::vector<AttentionScratch::Item>& items = c->scratch->items();
  for (size_t i; (i = c->next.fetch_add(1, std::memory_order_relaxed)) < items.size();) {
    AttendItem(*c, items[i], t);
  }
}

const char* AttentionTarget() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
