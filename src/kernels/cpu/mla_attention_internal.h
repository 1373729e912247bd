// What mla_attention.cc hands to its per-target decode (mla_attention-inl.h): one step's
// call, shared by every thread. Not a public API.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/mla_attention.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels::internal {

struct MlaCall {
  const MlaShape* shape;
  const tensor::PagedLatentView* latent;
  int layer;
  size_t row_bytes;  // one latent row as stored
  std::span<const AttentionSequence> seqs;  // decode rows: one token each, row s
  const float* q;
  float* out;
  float* states;             // per thread: states_per_thread floats (partition, then total)
  int64_t states_per_thread;
  std::atomic<int32_t> next{0};  // first unclaimed sequence
};

}  // namespace kvserve::kernels::internal
