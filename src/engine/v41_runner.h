// V41Runner: the engine's adapter for model::V41Model (the `kvserve-v41` hybrid-attention
// architecture), whose KV spans several groups (a sliding window group and compressed latent
// groups, model/v41_config.h), and the loader the engine dispatches to by architecture.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "gguf/gguf.h"
#include "model/v41.h"

namespace kvserve::engine {

// Owns the model and the step's V41Batch; the kv views are taken from the manager at the first
// step (arenas never move). Thread safety: one thread (the engine's).
class V41Runner final : public ModelRunner {
 public:
  explicit V41Runner(std::unique_ptr<model::V41Model> model) : model_(std::move(model)) {}
  int32_t vocab_size() const override { return static_cast<int32_t>(model_->config().vocab_size); }
  bool UsesKvGroups() const override { return true; }
  void Execute(const model::ForwardBatch& batch, const tensor::PagedKvView& kv, ThreadPool& pool,
               float* logits) override;  // CHECK-fails: the model needs every group
  void ExecuteGroups(const model::ForwardBatch& batch,
                     std::span<const std::vector<std::span<const int32_t>>> group_tables,
                     const kv::KvCacheManager& kv, ThreadPool& pool, float* logits) override;
  const model::V41Model& model() const { return *model_; }

 private:
  std::unique_ptr<model::V41Model> model_;
  std::optional<model::V41KvViews> views_;
  model::V41Batch batch_;
};

// Engine::LoadLlama's path for a `kvserve-v41` file: the same flags, the model's KV layout
// (model::MakeV41KvLayout) in the hybrid KV manager.
Result<std::unique_ptr<Engine>> LoadV41Engine(std::shared_ptr<const gguf::GgufFile> file,
                                              const EngineConfig& config);

}  // namespace kvserve::engine
