#include "planner/gguf_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "kv/config.h"

namespace kvserve::planner {
namespace {

// The weights' activation dtype as kvserve's "auto" KV dtype sees it.
tensor::DType ModelDType(const gguf::GgufFile& file) {
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd != nullptr && embd->dtype == tensor::DType::kF32) return tensor::DType::kF32;
  return tensor::DType::kF16;
}

void AddWeights(const gguf::GgufFile& file, ModelDesc& model) {
  WeightPart replicated{"norms (1-D)", 0, TpPlacement::kReplicated, false,
                        "1-D tensors: norms and biases, copied on every TP rank"};
  WeightPart sharded{"matrices", 0, TpPlacement::kSharded, false,
                     "2-D and larger tensors: projections and embeddings"};
  for (const gguf::TensorInfo& t : file.tensors()) {
    (t.dims.size() <= 1 ? replicated : sharded).bytes += t.size_bytes;
  }
  model.parts = {replicated, sharded};
  model.total_weight_bytes = replicated.bytes + sharded.bytes;
}

// `kvserve-v41` (model/v41_config.h, docs/v41-attention.md): a sliding window in every layer
// (one FP8 row of key_length values per token, K = V) plus one compressed-latent group per
// distinct ratio, written by its source layers and read by the layers up to the next source.
// The planner reads the metadata keys itself (it does not link model/).
Result<std::vector<KvGroupDesc>> V41KvGroups(const gguf::GgufFile& file, int num_layers,
                                             int64_t window) {
  const std::string a = "kvserve-v41.";
  KV_ASSIGN_OR_RETURN(int64_t latent_dim, file.GetInt(a + "attention.key_length"));
  KV_ASSIGN_OR_RETURN(int64_t index_dim, file.GetInt(a + "indexer.key_length"));
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> sources, file.GetIntArray(a + "compress.source_layers"));
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> ratios, file.GetIntArray(a + "compress.ratios"));
  if (sources.size() != ratios.size()) return InvalidArgument("kvserve-v41: sources != ratios");
  std::vector<KvGroupDesc> groups(1);
  groups[0].name = "window";
  groups[0].spec = kv::SlidingWindow{static_cast<int>(window), 1, static_cast<int>(latent_dim),
                                     tensor::DType::kFP8_E4M3_E8M0_32, true};
  for (int l = 0; l < num_layers; ++l) groups[0].layers.push_back(l);
  groups[0].fixed_dtype = true;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string name = fmt::format("latent/{}", ratios[i]);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const KvGroupDesc& g) { return g.name == name; });
    if (it == groups.end()) {
      KvGroupDesc g;
      g.name = name;
      g.spec = kv::CompressedLatent{static_cast<int>(latent_dim), static_cast<int>(ratios[i]),
                                    static_cast<int>(index_dim)};
      g.fixed_dtype = true;
      it = groups.insert(groups.end(), std::move(g));
    }
    it->layers.push_back(static_cast<int>(sources[i]));
    const int64_t end = i + 1 < sources.size() ? sources[i + 1] : num_layers;
    for (int64_t r = sources[i] + 1; r < end; ++r) it->readers.push_back(static_cast<int>(r));
  }
  return groups;
}

}  // namespace

Result<ModelDesc> ModelFromGguf(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  ModelDesc model;
  KV_ASSIGN_OR_RETURN(model.name, file.GetStringOr("general.name", arch));
  model.description = fmt::format("GGUF {} model", arch);
  model.source = file.path();
  KV_ASSIGN_OR_RETURN(int64_t layers, file.GetInt(arch + ".block_count"));
  KV_ASSIGN_OR_RETURN(int64_t heads, file.GetInt(arch + ".attention.head_count"));
  KV_ASSIGN_OR_RETURN(int64_t dim, file.GetInt(arch + ".embedding_length"));
  KV_ASSIGN_OR_RETURN(int64_t kv_heads, file.GetIntOr(arch + ".attention.head_count_kv", heads));
  KV_ASSIGN_OR_RETURN(model.max_model_len, file.GetInt(arch + ".context_length"));
  KV_ASSIGN_OR_RETURN(int64_t window, file.GetIntOr(arch + ".attention.sliding_window", 0));
  if (heads <= 0 || dim % heads != 0 || layers <= 0) {
    return InvalidArgument(fmt::format("{}: bad attention shape (dim {}, heads {}, layers {})",
                                       file.path(), dim, heads, layers));
  }
  KV_ASSIGN_OR_RETURN(int64_t head_dim, file.GetIntOr(arch + ".attention.key_length", dim / heads));
  KV_ASSIGN_OR_RETURN(tensor::DType dtype, kv::ParseKvCacheDType("auto", ModelDType(file)));
  model.num_layers = static_cast<int>(layers);
  KvGroupDesc group;
  group.layers.resize(model.num_layers);
  for (int i = 0; i < model.num_layers; ++i) group.layers[i] = i;
  if (window > 0) {
    group.name = "sliding";
    group.spec = kv::SlidingWindow{static_cast<int>(window), static_cast<int>(kv_heads),
                                   static_cast<int>(head_dim), dtype, false};
  } else {
    group.name = "full";
    group.spec =
        kv::FullAttention{static_cast<int>(kv_heads), static_cast<int>(head_dim), dtype, false};
  }
  if (arch == "kvserve-v41") {
    KV_ASSIGN_OR_RETURN(model.kv_groups, V41KvGroups(file, model.num_layers, window));
  } else {
    model.kv_groups.push_back(std::move(group));
  }
  AddWeights(file, model);
  KV_RETURN_IF_ERROR(ValidateModel(model, /*block_size=*/16).WithContext(file.path()));
  return model;
}

Result<ModelDesc> LoadGgufModel(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return ModelFromGguf(*file);
}

}  // namespace kvserve::planner
