// Paged attention on CPU: causal (optionally sliding-window) GQA/MQA attention over a ragged
// batch, reading K/V through block tables as stored in the cache (tensor::PagedKvView,
// head-major blocks).
//
// Order of a layer's step (so a token sees its own K/V as stored, after quantization):
//   1. the model computes this step's K/V rows (roped K) for every token,
//   2. WriteKv quantizes them into their cache slots,
//   3. PagedAttention reads every needed K/V back from the cache, dequantized.
//
// Numerics (fixed per query, DESIGN.md section 5). A query q (one head, position p) sees keys
// [lo, p] (lo = max(0, p - window + 1), or 0). Every step is a float operation in a fixed
// order; fma(a, b, c) is rounded once; exp is AttentionExp (attention_exp.h):
//   dot(q, k): 16 lanes; lane l = fma over c = l, l + 16, l + 32, ... in order (the first
//     product rounded alone); then lanes summed by halving (l += l + 8, + 4, + 2, + 1).
//     head_dim is zero-padded to a multiple of 16. s_j = scale * dot(q, k_j).
//   Keys are grouped in chunks of 16 and partitions of kPartition = 256 positions, both
//     aligned to absolute positions (chunk c = [16c, 16c + 16)). A partition's state
//     (m, L[16], acc[head_dim]) starts at (-inf, 0, 0); its chunks, in increasing order, do:
//       m' = max(m, max of the chunk's visible s_j); alpha = exp(m - m')
//       p_j = exp(s_j - m') for visible j, 0 for the others
//       L[j mod 16] = fma(L[j mod 16], alpha, p_j)
//       acc[d] = acc[d] * alpha, then acc[d] = fma(p_j, v_j[d], acc[d]) for visible j in order
//     (alpha == 1 skips the multiplies: the same bits).
//   Partitions are folded in increasing order into a total that starts at (-inf, 0, 0):
//       m = max(m_t, m_k); a = exp(m_t - m); b = exp(m_k - m)
//       L = fma(L_k, b, L_t * a); acc = fma(acc_k, b, acc_t * a)
//     skipping partitions the query sees no key of.
//   out[d] = acc[d] * (1 / sum), sum = the 16 lanes of L added by halving as above.
//   With attention sinks (gpt-oss: one learned logit s per query head, a softmax term with no
//   value), m' = max(m, s), a = exp(m - m'), sum' = fma(sum, a, exp(s - m')) and
//   out[d] = acc[d] * (a / sum').
// So a query's result depends only on its position, its window and the cached K/V: never on
// the other tokens of the batch, on how a prompt was chunked, on the work split, on the
// thread count or on the SIMD target (every target computes these operations lane by lane,
// with hardware FMA or std::fma). Example: a query at position 300 (no window) folds
// partition [0, 256) (chunks [0,16) .. [240,256)) and then [256, 301) (chunks up to
// [288, 301)); whether it is alone, in a 32-row prefill tile, or a decode whose partitions
// ran on two threads changes nothing. tests/kernels/attention_reference.cc is this contract
// as plain scalar code; the kernel matches it bit for bit.
//
// Parallelism: work items are (sequence, kv heads, tile of up to 64 consecutive query rows,
// range of partitions). A tile converts each 16-key chunk of a kv head's K/V to f32 once and
// reuses it for all its rows and all query heads of the kv head (GQA); K and V that are the
// same rows (a PagedKvLayer with v_base == k_base: MLA's latent) are converted once, as K.
// On AVX-512, a kv head whose chunk is read by at most 4 queries (a decode, GQA groups up to
// 4) reads F16 K/V of whole-head segments in place instead, widening each value as it is
// used (the same floats as the tile: the same bits). A decode row (one token) at 64 or 128
// dims with 1, 2 or 4 queries per kv head runs 4 queries of 4, 2 or 1 kv heads through a chunk
// in one straight-line step (UpdateHeadsF16, attention-inl.h): the heads' score, softmax and
// value chains are independent, so their latencies overlap instead of adding up. Such a walk
// requests its K/V ahead into L2 and L1 (DecodePrefetch, attention_item-inl.h) a few lines at
// a time between the step's loops, so that the arithmetic runs while the lines stream in.
// Queries of a kv head that see the same keys of a chunk share its loads: on AVX-512 up to 4
// of them compute their scores together in register tiles of 4 keys; on other targets an item
// with at least 4 queries of a kv head transposes the chunk's keys once, so that its scores are
// vector FMAs over the keys (the same operations either way, so the same bits:
// attention-inl.h). Items are claimed dynamically, the most expensive first (balances causal
// prefill). A sequence of at most kSplitMaxTokens tokens (a decode) takes several kv heads
// per item (all of them unless that would leave an item over 1 / (4 x threads) of the step's
// work) and walks each chunk's heads in turn: its K/V are read in the order they lie in a
// block (head-major), so the hardware prefetcher streams them. When a step has few items (a
// lone decode, a small batch at long context), such sequences are instead split into items
// of one kv head and consecutive partitions (flash-decoding): each partition's state is
// stored, and the thread that finishes a sequence's last item folds them in order.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels {

struct AttentionShape {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // divides num_heads; query head h reads kv head h / (heads / kv_heads)
  int head_dim = 0;
  float scale = 1.0f;    // usually 1 / sqrt(head_dim)
  // Sliding window: a query at position p sees [max(0, p - window + 1), p]; nullopt: [0, p].
  std::optional<int32_t> window;
  // Logit soft-capping (Gemma 2): s = softcap * tanh(s / softcap) on each scaled score, before
  // the softmax; nullopt = none.
  std::optional<float> softcap;
  // Attention sinks: (num_heads) logits, one per query head, added to the softmax denominator
  // (not scaled, not soft-capped); null: none. Not owned (usually the mapped file).
  const float* sinks = nullptr;
  // Values accumulated and written per query head: out[row, h, 0 : value_dim]; the rest of
  // each head's head_dim output values are left as they were. 0: head_dim. MLA's latent rows
  // are keys of latent_dim values whose first kv_lora_rank are the value (mla_attention.h).
  int value_dim = 0;
};

// One sequence's slice of a ragged batch. Its tokens are rows [first_row, first_row + num_tokens)
// of the batch's Q/K/V/output buffers, at positions [start_pos, start_pos + num_tokens).
// block_table covers positions [0, start_pos + num_tokens): entry i holds positions
// [i * block_size, (i + 1) * block_size).
struct AttentionSequence {
  int64_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  std::span<const int32_t> block_table;
};

// Working memory of PagedAttention, sized once for a shape, a context length and a thread
// count; fits every KV dtype. Per thread t (Q = the most queries of an item: kQueryTile *
// group of one kv head, or kSplitMaxTokens * num_heads of all kv heads; padded_head_dim =
// head_dim rounded up to 16; the padding stays zero):
//   key_rows, values: (kKeyChunk, padded_head_dim) f32, one chunk of one kv head, dequantized
//   keys:         (padded_head_dim, kKeyChunk) f32, key_rows transposed
//   staging:      (head_dim + 64) f32, whole quantized blocks around a head's slice
//   queries:      (Q, padded_head_dim) f32, the item's queries
//   part, total:  (Q, kStateFloats) f32 each, online-softmax states (partition, fold)
// plus the step's work items and, for split sequences, one state per (query, partition)
// (grown to the largest step, then kept). Owned by the caller; not shared between calls.
class AttentionScratch {
 public:
  static constexpr int kQueryTile = 64;   // query rows of one sequence per work item
  static constexpr int kKeyChunk = 16;    // keys per online-softmax step
  static constexpr int kPartition = 256;  // positions per partition (a multiple of kKeyChunk)
  static constexpr int kSplitMaxTokens = 8;  // sequences with more tokens are never split

  struct Thread {
    float* key_rows;
    float* keys;
    float* values;
    float* staging;
    float* queries;
    float* part;
    float* total;
  };
  // One work item: rows [first, first + count) of seqs[seq], kv heads [kv_head, kv_head +
  // heads), partitions [part_begin, part_end). split >= 0: the index of the sequence's split
  // group (the item stores each partition's state instead of folding it; heads == 1).
  // heads > 1 only for sequences of at most kSplitMaxTokens tokens.
  struct Item {
    int32_t seq = 0;
    int32_t first = 0;
    int32_t count = 0;
    int32_t kv_head = 0;
    int32_t heads = 1;
    int32_t part_begin = 0;
    int32_t part_end = 0;
    int32_t split = -1;
  };
  // A split (sequence, kv head): its partition states start at state index `first_state`
  // ((partition - part_begin) * queries + query), and `items` items work on it.
  struct Split {
    int32_t seq = 0;
    int32_t kv_head = 0;
    int32_t part_begin = 0;
    int32_t part_end = 0;
    int64_t first_state = 0;
    int32_t items = 0;
  };

  AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens, int num_threads);

  int32_t max_context_tokens() const { return max_context_tokens_; }
  int num_threads() const { return num_threads_; }
  int padded_head_dim() const { return padded_head_dim_; }
  // Floats of one softmax state: acc (padded_head_dim), L (16), m (1), padding to 16.
  int state_floats() const { return padded_head_dim_ + 32; }
  Thread ForThread(int t);
  std::vector<Item>& items() { return items_; }
  std::vector<Split>& splits() { return splits_; }
  // States of split sequences (states x state_floats()); grows, never shrinks.
  float* SplitStates(int64_t states);
  // One counter per split (items not yet finished); grows, never shrinks.
  std::atomic<int32_t>* SplitCounters(size_t splits);

 private:
  int32_t max_context_tokens_;
  int num_threads_;
  int padded_head_dim_;
  int64_t floats_per_thread_;
  static constexpr int kBuffers = 7;
  int64_t offsets_[kBuffers];
  std::vector<float> buffer_;  // 64-byte aligned num_threads x floats_per_thread_, zeroed
  std::vector<Item> items_;    // capacity grows to the largest step, then stays
  std::vector<Split> splits_;
  std::vector<float> split_states_;
  std::unique_ptr<std::atomic<int32_t>[]> split_counters_;
  size_t num_split_counters_ = 0;
};

// Quantizes this step's K and V rows into their cache slots of `layer`.
// k, v: (total rows, kv.row_elems). Every sequence's block table must cover its new positions.
void WriteKv(const tensor::PagedKvView& kv, int layer, std::span<const AttentionSequence> seqs,
             const float* k, const float* v, ThreadPool& pool);

// out[row, h, :] = sum_j softmax_j(scale * q[row, h, :] . K[j, kvh, :]) V[j, kvh, :] over the
// row's visible positions j, K/V read from the cache of `layer` (numerics: see above); with a
// value_dim, only out[row, h, 0 : value_dim] (acc[d] for d < value_dim: the same bits).
// q, out: (total rows, num_heads * head_dim); they must not alias.
// note: kv.row_elems == num_kv_heads * head_dim, and scratch was built for this shape with at
// least pool.num_threads() threads and a max context >= every position + 1 (CHECKed).
void PagedAttention(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
                    std::span<const AttentionSequence> seqs, const float* q, float* out,
                    ThreadPool& pool, AttentionScratch& scratch);

// The Highway target PagedAttention runs on ("AVX3", "AVX2", ...), for tests and benchmarks.
const char* AttentionTargetName();

}  // namespace kvserve::kernels
