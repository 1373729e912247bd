// What attention.cc and latent_attention.cc hand to their per-target code: one step's call,
// shared by every thread. Not a public API.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/latent_attention.h"

namespace kvserve::kernels::internal {

// Everything the threads need behind one pointer, so the std::function that ParallelFor
// takes stays in its small-object buffer (no allocation per call).
struct AttentionCall {
  const AttentionShape* shape;
  const tensor::PagedKvView* kv;
  int layer;
  std::span<const AttentionSequence> seqs;
  const float* q;
  float* out;
  AttentionScratch* scratch;
  float* split_states;                  // AttentionScratch::SplitStates of this step
  std::atomic<int32_t>* split_counters;  // AttentionScratch::SplitCounters of this step
  std::atomic<size_t> next{0};          // first unclaimed item
};

// The same for HybridAttention (latent_attention-inl.h).
struct HybridCall {
  const HybridAttentionShape* shape;
  const tensor::PagedKvView* window;
  int window_slot;
  const tensor::PagedLatentView* latent;
  int latent_slot;
  std::span<const HybridSequence> seqs;
  const float* q;
  const float* q_idx;
  const float* idx_w;
  float* out;
  HybridAttentionScratch* scratch;
};

// Values accumulated per query head (AttentionShape::value_dim), rounded up to 16 and at most
// padded_hd: the accumulators past it are never touched.
inline int ValueDim(const AttentionShape& shape) {
  return shape.value_dim > 0 ? shape.value_dim : shape.head_dim;
}
inline int PaddedValueDim(const AttentionShape& shape, int padded_hd) {
  const int padded = (ValueDim(shape) + 15) / 16 * 16;
  return padded < padded_hd ? padded : padded_hd;
}

inline int32_t WindowStart(const AttentionShape& shape, int32_t pos) {
  return shape.window ? (pos - *shape.window + 1 > 0 ? pos - *shape.window + 1 : 0) : 0;
}

}  // namespace kvserve::kernels::internal
