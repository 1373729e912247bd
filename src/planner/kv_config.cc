// PlanKvConfig and PlanKvCapacity: the ModelDesc -> kv::KvCacheConfig bridge (planner/plan.h).
// A GGUF model's config comes from model::MakeModelKvLayout, the function the server's
// startup reaches; only presets (models with no GGUF here) are mapped by this file.
#include <fmt/format.h>

#include <map>

#include "planner/plan.h"

namespace kvserve::planner {
namespace {

// The rank's share of `heads` KV heads under tensor parallelism: heads / tp when tp divides
// them, 1 (each rank keeps a copy of one head) when heads divides tp.
// Example: 8 heads, tp 4 -> 2 per rank; 1 head (latent-like), tp 4 -> 1 per rank (replicated).
Result<int> HeadsPerRank(int heads, int tp, const std::string& group) {
  if (heads % tp == 0) return heads / tp;
  if (tp % heads == 0) return 1;
  return InvalidArgument(
      fmt::format("KV group {}: {} KV heads cannot be split over tp {}", group, heads, tp));
}

// Splits a full / sliding spec's KV heads over tp ranks (a latent is one head: replicated).
Status SplitHeads(kv::KvLayoutSpec& spec, int tp, const std::string& group) {
  if (auto* f = std::get_if<kv::FullAttention>(&spec)) {
    KV_ASSIGN_OR_RETURN(f->num_kv_heads, HeadsPerRank(f->num_kv_heads, tp, group));
  } else if (auto* s = std::get_if<kv::SlidingWindow>(&spec)) {
    KV_ASSIGN_OR_RETURN(s->num_kv_heads, HeadsPerRank(s->num_kv_heads, tp, group));
  }
  return Status::Ok();
}

// Applies tp and the --kv-cache-dtype flag to one preset group's spec.
Result<kv::KvLayoutSpec> RankSpec(const KvGroupDesc& g, int tp, std::string_view dtype_flag) {
  kv::KvLayoutSpec spec = g.spec;
  const bool override_dtype = !g.fixed_dtype && dtype_flag != "auto";
  std::optional<tensor::DType> dtype;
  if (override_dtype) {
    KV_ASSIGN_OR_RETURN(dtype, kv::ParseKvCacheDType(dtype_flag, tensor::DType::kF16));
  }
  KV_RETURN_IF_ERROR(SplitHeads(spec, tp, g.name));
  if (!dtype) return spec;
  if (auto* f = std::get_if<kv::FullAttention>(&spec)) {
    f->dtype = *dtype;
  } else if (auto* s = std::get_if<kv::SlidingWindow>(&spec)) {
    s->dtype = *dtype;
  } else if (auto* l = std::get_if<kv::CompressedLatent>(&spec)) {
    l->latent_dtype = *dtype;  // a single-head latent: replicated, never split
  }
  return spec;
}

// A GGUF model: the server's own config (model::MakeModelKvLayout, what `kvserve serve`
// allocates), then each rank's share of the KV heads.
Result<kv::KvCacheConfig> GgufKvConfig(const ModelDesc& model, int tp, int block_size,
                                       int64_t max_model_len, int64_t max_chunk_tokens,
                                       std::string_view kv_cache_dtype) {
  model::KvLayoutOptions options;
  options.kv_cache_dtype = std::string(kv_cache_dtype);
  options.block_size = block_size;
  options.max_model_len = max_model_len;
  options.max_chunk_tokens = max_chunk_tokens;
  Result<model::ModelKvLayout> layout = model::MakeModelKvLayout(*model.kv_shape, options);
  if (!layout.ok()) return layout.status().WithContext(model.name);
  kv::KvCacheConfig config = std::move(layout->config);
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const std::string name = g < model.kv_groups.size() ? model.kv_groups[g].name : "";
    KV_RETURN_IF_ERROR(SplitHeads(config.groups[g].spec, tp, name));
  }
  KV_RETURN_IF_ERROR(kv::ValidateConfig(config).WithContext(model.name));
  return config;
}

// The source layer a latent reader reads: the nearest writer at or below it.
// Example: writers {2, 8, 14}, reader 11 -> 8.
Result<int> SourceOf(const std::vector<int>& writers, int reader, const std::string& group) {
  int source = -1;
  for (int w : writers) {
    if (w < reader) source = w;
  }
  if (source < 0) {
    return InvalidArgument(
        fmt::format("KV group {}: reader layer {} has no writer below it", group, reader));
  }
  return source;
}

}  // namespace

// Presets (no GGUF): built here from the ModelDesc groups.
// kv::KvCacheConfig counts each layer id in exactly one group. A model whose layers hold two
// kinds of KV at once (DeepSeek-V4.1: every layer has a sliding window, layers 2-39 also read
// a latent) gets extra "KV slot" ids past num_layers for its second and later groups; slot
// ids only name allocations, so the bytes are unchanged.
// Example: V4.1, window group = layers 0-39 (slots 0-39); latent/2 writers 2,8,14 and readers
// 3-7,9-13,15-19 -> slots 40-57; latent/1 writer 20, readers 21-39 -> slots 58-77; 78 slots.
Result<kv::KvCacheConfig> PlanKvConfig(const ModelDesc& model, int tp, int block_size,
                                       int64_t max_model_len, int64_t max_chunk_tokens,
                                       std::string_view kv_cache_dtype) {
  if (tp <= 0) return InvalidArgument("tp must be positive");
  if (model.kv_shape) {
    return GgufKvConfig(model, tp, block_size, max_model_len, max_chunk_tokens, kv_cache_dtype);
  }
  kv::KvCacheConfig config;
  config.block_size = block_size;
  config.max_model_len = max_model_len;
  config.max_chunk_tokens = max_chunk_tokens;
  std::vector<bool> used(model.num_layers, false);
  int next_slot = model.num_layers;
  auto slot_of = [&](int layer, std::map<int, int>& slots) {
    if (layer >= 0 && layer < model.num_layers && !used[layer]) {
      used[layer] = true;
      slots[layer] = layer;
    } else {
      slots[layer] = next_slot++;
    }
    return slots[layer];
  };
  for (const KvGroupDesc& g : model.kv_groups) {
    kv::KvCacheGroup group;
    KV_ASSIGN_OR_RETURN(group.spec, RankSpec(g, tp, kv_cache_dtype));
    std::map<int, int> slots;
    for (int layer : g.layers) group.layers.push_back(slot_of(layer, slots));
    for (int reader : g.readers) {
      KV_ASSIGN_OR_RETURN(int source, SourceOf(g.layers, reader, g.name));
      group.readers.push_back({slot_of(reader, slots), slots.at(source)});
    }
    config.groups.push_back(std::move(group));
  }
  config.num_layers = next_slot;
  KV_RETURN_IF_ERROR(kv::ValidateConfig(config).WithContext(model.name));
  return config;
}

Result<kv::KvCapacity> PlanKvCapacity(const kv::KvCacheConfig& config, uint64_t budget_bytes) {
  return kv::ComputeCapacity(config, budget_bytes);
}

}  // namespace kvserve::planner
