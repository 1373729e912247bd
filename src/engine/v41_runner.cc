#include "engine/v41_runner.h"

#include "core/check.h"
#include "model/kv_layout.h"
#include "tokenizer/vocab.h"

namespace kvserve::engine {

void V41Runner::Execute(const model::ForwardBatch&, const tensor::PagedKvView&, ThreadPool&,
                        float*) {
  CHECK(false) << "V41Runner runs through ExecuteGroups (it uses several KV groups)";
}

void V41Runner::ExecuteGroups(const model::ForwardBatch& batch,
                              std::span<const std::vector<std::span<const int32_t>>> group_tables,
                              const kv::KvCacheManager& kv, ThreadPool& pool, float* logits) {
  if (!views_) {
    views_.emplace();
    views_->window = kv.KvView(0);
    views_->latent.resize(kv.num_groups());
    for (int g = 1; g < kv.num_groups(); ++g) views_->latent[g] = kv.LatentView(g);
  }
  CHECK_EQ(group_tables.size(), batch.sequences.size());
  batch_.sequences.resize(batch.sequences.size());
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const model::SequenceInput& in = batch.sequences[i];
    model::V41SequenceInput& out = batch_.sequences[i];
    out.tokens = in.tokens;
    out.start_pos = in.start_pos;
    out.want_logits = in.want_logits;
    out.block_tables.assign(group_tables[i].begin(), group_tables[i].end());
  }
  model_->Forward(batch_, *views_, pool, logits);
}

Result<std::unique_ptr<Engine>> LoadV41Engine(std::shared_ptr<const gguf::GgufFile> file,
                                              const EngineConfig& config) {
  KV_ASSIGN_OR_RETURN(model::V41Config mc, model::ReadV41Config(*file));
  KV_RETURN_IF_ERROR(kv::ValidateBlockSize(config.block_size));
  const uint64_t budget = config.KvBudgetBytes();
  const model::V41KvLayout at_context = model::MakeV41KvLayout(
      mc, config.block_size, mc.context_length, config.max_num_batched_tokens);
  KV_ASSIGN_OR_RETURN(
      int64_t max_model_len,
      ResolveMaxModelLen(at_context.kv_config, budget, mc.context_length, config.max_model_len));
  const model::V41KvLayout layout =
      model::MakeV41KvLayout(mc, config.block_size, max_model_len, config.max_num_batched_tokens);
  model::LoadOptions load;
  load.max_batch_tokens = config.max_num_batched_tokens;
  load.max_context_tokens = static_cast<int32_t>(max_model_len);
  load.max_threads = config.num_threads;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<model::V41Model> model, model::V41Model::Load(file, load));
  return Engine::CreateForGguf(*file, mc.architecture, std::make_unique<V41Runner>(std::move(model)),
                               layout.kv_config, config);
}

}  // namespace kvserve::engine
