// Test support. FakeModel: a deterministic stand-in for a model, for tests of the engine's
// bookkeeping (no weights, but real K/V traffic through the block tables).
//
// For each token at position p it stores the chain value h[p] = Mix(h[p-1], token, p)
// (h[-1] = seed) in the token's K row of group 0, reading h[p-1] back from the cache when p
// starts a chunk; the logits of a sequence are a pure function of its last chain value. So
// outputs depend on every earlier token exactly as a real model's do, and any wrong block
// table, stale prefix-cache block or lost KV changes them.
// note: group 0 must be a paged group with at least 8 bytes per K row (e.g. f32 with
// row_elems >= 2); only layer 0 is used. Stateless apart from its constants: thread-compatible.
#pragma once

#include <cstdint>
#include <span>

#include "core/check.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace kvserve::engine::testing {

class FakeModel final : public model::Model {
 public:
  FakeModel(int32_t vocab_size, uint64_t seed) : vocab_size_(vocab_size), seed_(seed) {}
  std::string_view architecture() const override { return "fake"; }
  int64_t vocab_size() const override { return vocab_size_; }
  void Forward(const model::Batch& batch, const model::KvViews& kv, ThreadPool& pool,
               float* logits) override;

 private:
  int32_t vocab_size_;
  uint64_t seed_;
};

namespace fake_model_internal {

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t* KSlot(const tensor::PagedKvView& kv, std::span<const int32_t> table, int64_t pos) {
  const int32_t block = table[pos / kv.block_size];
  return reinterpret_cast<uint64_t*>(kv.KSegment(0, block, static_cast<int>(pos % kv.block_size), 0));
}

}  // namespace fake_model_internal

inline void FakeModel::Forward(const model::Batch& batch, const model::KvViews& views,
                               ThreadPool& pool, float* logits) {
  const tensor::PagedKvView& kv = views.paged.at(0);
  CHECK_GE(kv.segment_bytes, 8u) << "FakeModel needs 8-byte K segments";
  int64_t row = 0;
  for (const model::SequenceInput& seq : batch.sequences) {
    const std::span<const int32_t> table = seq.block_tables[0];
    uint64_t h =
        seq.start_pos == 0 ? seed_ : *fake_model_internal::KSlot(kv, table, seq.start_pos - 1);
    const size_t first_logit = seq.tokens.size() - static_cast<size_t>(seq.num_logits);
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int64_t pos = seq.start_pos + static_cast<int64_t>(i);
      h = fake_model_internal::Mix(h ^
                                   fake_model_internal::Mix(static_cast<uint64_t>(seq.tokens[i]) +
                                                            (static_cast<uint64_t>(pos) << 32)));
      *fake_model_internal::KSlot(kv, table, pos) = h;
      if (i < first_logit) continue;
      float* out = logits + row * vocab_size_;
      for (int32_t v = 0; v < vocab_size_; ++v) {
        // 24 random bits -> [0, 8): a spread of logits with distinct values.
        out[v] = static_cast<float>(fake_model_internal::Mix(h + static_cast<uint64_t>(v)) >> 40) *
                 (8.0f / 16777216.0f);
      }
      ++row;
    }
  }
}

}  // namespace kvserve::engine::testing
