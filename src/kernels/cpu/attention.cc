// Paged attention entry points: work items, scratch, Highway dispatch (the per-target code is
// in attention-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/attention-inl.h"
#include "kernels/cpu/attention_item-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/kv_dequant.h"

namespace kvserve::kernels {

HWY_EXPORT(AttendWorker);
HWY_EXPORT(AttentionTarget);

namespace {

constexpr int kQueryTile = AttentionScratch::kQueryTile;
constexpr int kPartition = AttentionScratch::kPartition;
constexpr int kSplitMaxTokens = AttentionScratch::kSplitMaxTokens;
// Items per thread below which short sequences are split into partition items.
constexpr int64_t kMinItemsPerThread = 4;
// Split items per thread to aim for.
constexpr int64_t kSplitItemsPerThread = 8;

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

struct SeqParts {
  int32_t begin = 0;  // first partition any row of the sequence sees
  int32_t end = 0;    // one past the last
};

SeqParts PartitionsOf(const AttentionShape& shape, const AttentionSequence& s, int32_t first,
                      int32_t count) {
  const int32_t pos0 = s.start_pos + first;
  return {internal::WindowStart(shape, pos0) / kPartition, (pos0 + count - 1) / kPartition + 1};
}

// Visible keys x query rows x kv heads of sequence s (at most; a causal prefill sees fewer):
// the cost measure of the work split.
int64_t SequenceCost(const AttentionShape& shape, const AttentionSequence& s) {
  const int32_t end = s.start_pos + s.num_tokens;
  return int64_t{end - internal::WindowStart(shape, s.start_pos)} * s.num_tokens *
         shape.num_kv_heads;
}

// Kv heads per item of an unsplit sequence of at most kSplitMaxTokens tokens: the most (a
// divisor of kv_heads) whose items still cost at most 1 / (kMinItemsPerThread * threads) of
// the step, so that the items balance over the threads (all of them on one thread).
// Example: 16 equal decodes on 2 threads, 16 kv heads: each item 1/16 of the step, so 16
// heads per item; one decode among them with 16x the context: 2 heads per item.
int32_t HeadsPerItem(int kv_heads, int64_t seq_cost, int64_t step_cost, int num_threads) {
  if (num_threads == 1) return kv_heads;
  for (int32_t heads = kv_heads; heads > 1; --heads) {
    if (kv_heads % heads == 0 &&
        seq_cost * heads * kMinItemsPerThread * num_threads <= step_cost * kv_heads) {
      return heads;
    }
  }
  return 1;
}

// Work items of a step (attention.h). Sequences are split into
// partition items only when the step has fewer than kMinItemsPerThread items per thread
// otherwise, and only those with at most kSplitMaxTokens tokens (decodes); unsplit, those take
// HeadsPerItem kv heads per item. Which items exist changes no result: a query's arithmetic
// is the same in any item.
void BuildItems(const AttentionShape& shape, std::span<const AttentionSequence> seqs,
                int num_threads, AttentionScratch& scratch) {
  std::vector<AttentionScratch::Item>& items = scratch.items();
  std::vector<AttentionScratch::Split>& splits = scratch.splits();
  items.clear();
  splits.clear();
  const int kv_heads = shape.num_kv_heads;
  const int group = shape.num_heads / kv_heads;
  int64_t tiles = 0;
  int64_t split_parts = 0;  // partitions x kv heads of the sequences that may be split
  int64_t step_cost = 0;
  for (const AttentionSequence& s : seqs) {
    tiles += (s.num_tokens + kQueryTile - 1) / kQueryTile;
    step_cost += SequenceCost(shape, s);
    if (s.num_tokens > 0 && s.num_tokens <= kSplitMaxTokens) {
      const SeqParts p = PartitionsOf(shape, s, 0, s.num_tokens);
      split_parts += int64_t{p.end - p.begin} * kv_heads;
    }
  }
  const bool split = tiles * kv_heads < kMinItemsPerThread * num_threads && split_parts > 0;
  const int32_t parts_per_item = static_cast<int32_t>(std::max<int64_t>(
      1, (split_parts + kSplitItemsPerThread * num_threads - 1) / (kSplitItemsPerThread * num_threads)));
  int64_t states = 0;
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    const AttentionSequence& s = seqs[si];
    if (split && s.num_tokens > 0 && s.num_tokens <= kSplitMaxTokens) {
      const SeqParts p = PartitionsOf(shape, s, 0, s.num_tokens);
      for (int h = 0; h < kv_heads; ++h) {
        const int32_t index = static_cast<int32_t>(splits.size());
        AttentionScratch::Split sp{si, h, p.begin, p.end, states, 0};
        for (int32_t b = p.begin; b < p.end; b += parts_per_item) {
          items.push_back(
              {si, 0, s.num_tokens, h, 1, b, std::min(b + parts_per_item, p.end), index});
          ++sp.items;
        }
        splits.push_back(sp);
        states += int64_t{p.end - p.begin} * s.num_tokens * group;
      }
      continue;
    }
    const int32_t heads =
        s.num_tokens <= kSplitMaxTokens
            ? HeadsPerItem(kv_heads, SequenceCost(shape, s), step_cost, num_threads)
            : 1;
    for (int32_t first = 0; first < s.num_tokens; first += kQueryTile) {
      const int32_t count = std::min(kQueryTile, s.num_tokens - first);
      const SeqParts p = PartitionsOf(shape, s, first, count);
      for (int h = 0; h < kv_heads; h += heads) {
        items.push_back({si, first, count, h, heads, p.begin, p.end, -1});
      }
    }
  }
  scratch.SplitStates(states);
  auto cost = [&](const AttentionScratch::Item& it) {
    const AttentionSequence& s = seqs[it.seq];
    const int32_t last = s.start_pos + it.first + it.count - 1;
    const int32_t lo = std::max(it.part_begin * kPartition,
                                internal::WindowStart(shape, s.start_pos + it.first));
    const int32_t hi = std::min(it.part_end * kPartition, last + 1);
    return static_cast<int64_t>(hi - lo) * it.count * it.heads;
  };
  // kv head by kv head, so that a thread's consecutive items reuse one head's K/V from its
  // cache (a prefill tile reads every earlier key of its head), and within a head the most
  // expensive first.
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return x.kv_head != y.kv_head ? x.kv_head < y.kv_head : cost(x) > cost(y);
  });
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens,
                                   int num_threads)
    : max_context_tokens_(max_context_tokens), num_threads_(num_threads) {
  CHECK_GT(shape.num_kv_heads, 0);
  CHECK_EQ(shape.num_heads % shape.num_kv_heads, 0);
  CHECK_GE(num_threads, 1);
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t hd = shape.head_dim;
  padded_head_dim_ = static_cast<int>((hd + 15) / 16 * 16);
  const int64_t queries = std::max<int64_t>(kQueryTile * group,
                                            int64_t{kSplitMaxTokens} * shape.num_heads);
  // key_rows, keys, values, staging, queries, part, total
  const int64_t tile = kKeyChunk * padded_head_dim_;
  const int64_t sizes[kBuffers] = {tile, tile, tile, hd + 64, queries * padded_head_dim_,
                                   queries * state_floats(), queries * state_floats()};
  floats_per_thread_ = 0;
  for (int i = 0; i < kBuffers; ++i) {
    offsets_[i] = floats_per_thread_;
    floats_per_thread_ += (sizes[i] + 15) / 16 * 16;  // 64-byte multiples
  }
  buffer_.assign(static_cast<size_t>(floats_per_thread_ * num_threads + 16), 0.0f);
}

AttentionScratch::Thread AttentionScratch::ForThread(int t) {
  CHECK(t >= 0 && t < num_threads_);
  // Aligned to 64 bytes: every buffer starts on a cache line.
  const uintptr_t address = reinterpret_cast<uintptr_t>(buffer_.data());
  float* base = buffer_.data() + ((64 - address % 64) % 64) / sizeof(float) + t * floats_per_thread_;
  return {base + offsets_[0], base + offsets_[1], base + offsets_[2], base + offsets_[3],
          base + offsets_[4], base + offsets_[5], base + offsets_[6]};
}

float* AttentionScratch::SplitStates(int64_t states) {
  const size_t floats = static_cast<size_t>(states * state_floats());
  if (split_states_.size() < floats) split_states_.resize(floats);
  return split_states_.data();
}

std::atomic<int32_t>* AttentionScratch::SplitCounters(size_t splits) {
  if (num_split_counters_ < splits) {
    split_counters_ = std::make_unique<std::atomic<int32_t>[]>(splits);
    num_split_counters_ = splits;
  }
  return split_counters_.get();
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
      StoreKvRow(kv, layer, KvPart::kKey, block, slot, k + offset);
      StoreKvRow(kv, layer, KvPart::kValue, block, slot, v + offset);
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
  CHECK(shape.value_dim >= 0 && shape.value_dim <= shape.head_dim) << "value_dim past head_dim";
  CHECK_EQ(kv.segment_elems % shape.head_dim, 0) << "segments hold whole heads";
  TotalRows(seqs);
  for (const AttentionSequence& s : seqs) {
    CHECK_LE(s.start_pos + s.num_tokens, scratch.max_context_tokens())
        << "attention scratch too small";
  }
  BuildItems(shape, seqs, pool.num_threads(), scratch);
  std::atomic<int32_t>* counters = scratch.SplitCounters(scratch.splits().size());
  for (size_t i = 0; i < scratch.splits().size(); ++i) {
    counters[i].store(scratch.splits()[i].items, std::memory_order_relaxed);
  }
  internal::AttentionCall call{&shape, &kv,  layer, seqs, q, out, &scratch,
                               scratch.SplitStates(0), counters};
  pool.ParallelFor(static_cast<size_t>(pool.num_threads()), [c = &call](size_t, size_t, int t) {
    HWY_DYNAMIC_DISPATCH(AttendWorker)(c, t);
  });
}

const char* AttentionTargetName() {
  return HWY_DYNAMIC_DISPATCH(AttentionTarget)();
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
