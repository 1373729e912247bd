// ModelRunner: what the engine calls to run one forward step. The llama adapter wraps
// model::LlamaModel; FakeModelRunner stands in for tests and benchmarks of the engine's
// bookkeeping (no weights, but real K/V traffic through the block tables).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "model/llama.h"
#include "tensor/kv_view.h"

namespace kvserve::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int32_t vocab_size() const = 0;

  // Runs one step: writes every sequence's tokens' K/V through its block table and writes
  // logits (batch.NumLogitRows(), vocab_size()) for the sequences with want_logits, in order.
  // Contract (as LlamaModel::Forward): a sequence's logits depend only on its own tokens and
  // K/V, never on the rest of the batch, the chunking or the thread count.
  virtual void Execute(const model::ForwardBatch& batch, const tensor::PagedKvView& kv,
                       ThreadPool& pool, float* logits) = 0;

  // Models whose KV spans several groups (model/v41.h) return true; the engine then calls
  // ExecuteGroups, with group_tables[i][g] = sequence i's block table in KV group g (the
  // batch's SequenceInput::block_table is group 0's), and the manager that owns the arenas.
  virtual bool UsesKvGroups() const { return false; }
  virtual void ExecuteGroups(const model::ForwardBatch& batch,
                             std::span<const std::vector<std::span<const int32_t>>> group_tables,
                             const kv::KvCacheManager& kv, ThreadPool& pool, float* logits) {
    CHECK(false) << "this runner uses one KV group (UsesKvGroups() is false)";
  }
};

// The real model. Owns the LlamaModel.
class LlamaRunner final : public ModelRunner {
 public:
  explicit LlamaRunner(std::unique_ptr<model::LlamaModel> model) : model_(std::move(model)) {}
  int32_t vocab_size() const override { return static_cast<int32_t>(model_->config().vocab_size); }
  void Execute(const model::ForwardBatch& batch, const tensor::PagedKvView& kv, ThreadPool& pool,
               float* logits) override {
    model_->Forward(batch, kv, pool, logits);
  }
  const model::LlamaModel& model() const { return *model_; }

 private:
  std::unique_ptr<model::LlamaModel> model_;
};

// A deterministic stand-in for a model. For each token at position p it stores the chain
// value h[p] = Mix(h[p-1], token, p) (h[-1] = seed) in the token's K row, reading h[p-1] back
// from the cache when p starts a chunk; the logits of a sequence are a pure function of its
// last chain value. So outputs depend on every earlier token exactly as a real model's do,
// and any wrong block table, stale prefix-cache block or lost KV changes them.
// note: the KV view must hold at least 8 bytes per K row (e.g. f32 with row_elems >= 2); only
// layer 0 is used. Stateless apart from its constants: thread-compatible.
class FakeModelRunner final : public ModelRunner {
 public:
  FakeModelRunner(int32_t vocab_size, uint64_t seed) : vocab_size_(vocab_size), seed_(seed) {}
  int32_t vocab_size() const override { return vocab_size_; }
  void Execute(const model::ForwardBatch& batch, const tensor::PagedKvView& kv, ThreadPool& pool,
               float* logits) override;

 private:
  int32_t vocab_size_;
  uint64_t seed_;
};

}  // namespace kvserve::engine
