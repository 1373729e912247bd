#include "engine/model_runner.h"

#include <cstring>

#include "core/check.h"

namespace kvserve::engine {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t* KSlot(const tensor::PagedKvView& kv, std::span<const int32_t> table, int64_t pos) {
  const int32_t block = table[pos / kv.block_size];
  return reinterpret_cast<uint64_t*>(kv.KSegment(0, block, static_cast<int>(pos % kv.block_size), 0));
}

}  // namespace

void FakeModelRunner::Execute(const model::ForwardBatch& batch, const tensor::PagedKvView& kv,
                              ThreadPool& pool, float* logits) {
  CHECK_GE(kv.segment_bytes, 8u) << "FakeModelRunner needs 8-byte K segments";
  int64_t row = 0;
  for (const model::SequenceInput& seq : batch.sequences) {
    uint64_t h = seq.start_pos == 0 ? seed_ : *KSlot(kv, seq.block_table, seq.start_pos - 1);
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int64_t pos = seq.start_pos + static_cast<int64_t>(i);
      h = Mix(h ^ Mix(static_cast<uint64_t>(seq.tokens[i]) + (static_cast<uint64_t>(pos) << 32)));
      *KSlot(kv, seq.block_table, pos) = h;
    }
    if (!seq.want_logits) continue;
    float* out = logits + row * vocab_size_;
    for (int32_t v = 0; v < vocab_size_; ++v) {
      // 24 random bits -> [0, 8): a spread of logits with distinct values.
      out[v] = static_cast<float>(Mix(h + static_cast<uint64_t>(v)) >> 40) * (8.0f / 16777216.0f);
    }
    ++row;
  }
}

}  // namespace kvserve::engine
