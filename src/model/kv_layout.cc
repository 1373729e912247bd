#include "model/kv_layout.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "model/architecture.h"
#include "model/config.h"
#include "model/deepseek2_config.h"

namespace kvserve::model {

DenseKvShape DenseKvShape::Uniform(int num_layers, int num_kv_heads, int head_dim, int window) {
  return {num_layers, num_kv_heads, head_dim, std::vector<int>(num_layers, window)};
}

std::vector<DenseKvGroup> DenseKvGroups(const DenseKvShape& shape) {
  std::vector<int> windows(shape.layer_windows.begin(), shape.layer_windows.end());
  std::sort(windows.begin(), windows.end());  // 0 (full) first
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  std::vector<DenseKvGroup> groups;
  for (int window : windows) {
    DenseKvGroup g{window, {}};
    for (int l = 0; l < shape.num_layers; ++l) {
      if (shape.layer_windows[l] == window) g.layers.push_back(l);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

kv::KvCacheConfig MakeDenseKvCacheConfig(const DenseKvShape& shape, tensor::DType kv_dtype,
                                         int block_size, int64_t max_model_len,
                                         int64_t max_chunk_tokens) {
  kv::KvCacheConfig kv_config;
  kv_config.num_layers = shape.num_layers;
  kv_config.block_size = block_size;
  kv_config.max_model_len = max_model_len;
  kv_config.max_chunk_tokens = max_chunk_tokens;
  for (const DenseKvGroup& g : DenseKvGroups(shape)) {
    kv::KvCacheGroup group;
    if (g.window > 0) {
      group.spec = kv::SlidingWindow{g.window, shape.num_kv_heads, shape.head_dim, kv_dtype};
    } else {
      group.spec = kv::FullAttention{shape.num_kv_heads, shape.head_dim, kv_dtype};
    }
    group.layers = g.layers;
    kv_config.groups.push_back(std::move(group));
  }
  return kv_config;
}

tensor::DType ModelActivationDType(const gguf::GgufFile& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.dims.size() >= 2 && t.dtype != tensor::DType::kF32) return tensor::DType::kF16;
  }
  return tensor::DType::kF32;
}

namespace {

// A positive int metadata value that fits an int (layer counts, heads, dims).
Result<int> PositiveIntKey(const gguf::GgufFile& file, const std::string& key,
                           std::optional<int64_t> fallback = std::nullopt) {
  Result<int64_t> value = fallback ? file.GetIntOr(key, *fallback) : file.GetInt(key);
  if (!value.ok()) {
    if (value.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(fmt::format("model metadata lacks required key '{}'", key));
    }
    return value.status();
  }
  if (*value <= 0 || *value > (int64_t{1} << 30)) {
    return InvalidArgument(fmt::format("'{}' must be in [1, 2^30], got {}", key, *value));
  }
  return static_cast<int>(*value);
}

// A dense architecture kvserve does not run: every layer the same, windowed when the file has
// `{arch}.attention.sliding_window`.
Result<DenseKvShape> ReadGenericDenseShape(const gguf::GgufFile& file, const std::string& arch) {
  KV_ASSIGN_OR_RETURN(int num_layers, PositiveIntKey(file, arch + ".block_count"));
  KV_ASSIGN_OR_RETURN(int heads, PositiveIntKey(file, arch + ".attention.head_count"));
  KV_ASSIGN_OR_RETURN(int dim, PositiveIntKey(file, arch + ".embedding_length"));
  KV_ASSIGN_OR_RETURN(int kv_heads, PositiveIntKey(file, arch + ".attention.head_count_kv", heads));
  if (dim % heads != 0 && file.Find(arch + ".attention.key_length") == nullptr) {
    return InvalidArgument(
        fmt::format("head_count {} does not divide embedding_length {}", heads, dim));
  }
  KV_ASSIGN_OR_RETURN(int head_dim,
                      PositiveIntKey(file, arch + ".attention.key_length", dim / heads));
  KV_ASSIGN_OR_RETURN(int64_t window, file.GetIntOr(arch + ".attention.sliding_window", 0));
  if (window < 0) return InvalidArgument(fmt::format("{}.attention.sliding_window < 0", arch));
  return DenseKvShape::Uniform(num_layers, kv_heads, head_dim,
                               static_cast<int>(std::min<int64_t>(window, int64_t{1} << 30)));
}

// An architecture kvserve runs: the KV its forward pass reads (model::ReadModelHyperparameters).
Result<DenseKvShape> ReadRunnableDenseShape(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(ModelConfig c, ReadModelHyperparameters(file));
  DenseKvShape d;
  d.num_layers = static_cast<int>(c.num_layers);
  d.num_kv_heads = static_cast<int>(c.num_kv_heads);
  d.head_dim = static_cast<int>(c.head_dim);
  d.layer_windows.assign(c.layer_window.begin(), c.layer_window.end());
  return d;
}

// The names of MakeDenseKvCacheConfig's groups: "full", or "sliding" (with the window when
// there are several).
std::vector<KvGroupInfo> DenseGroupInfo(const DenseKvShape& d) {
  const std::vector<DenseKvGroup> groups = DenseKvGroups(d);
  int sliding_groups = 0;
  for (const DenseKvGroup& g : groups) sliding_groups += g.window > 0 ? 1 : 0;
  std::vector<KvGroupInfo> out;
  for (const DenseKvGroup& g : groups) {
    std::string name = g.window == 0         ? "full"
                       : sliding_groups == 1 ? "sliding"
                                             : fmt::format("sliding/{}", g.window);
    out.push_back({std::move(name), g.layers, {}, false});
  }
  return out;
}

// The names and model layers of MakeV41KvLayout's groups, in its order: "window" over every
// layer, then "latent/R" per distinct ratio R (first appearance), writers = its sources,
// readers = the layers that read them.
std::vector<KvGroupInfo> V41GroupInfo(const V41Config& c) {
  const int num_layers = static_cast<int>(c.num_layers);
  std::vector<KvGroupInfo> groups(1);
  groups[0].name = "window";
  groups[0].fixed_dtype = true;
  for (int l = 0; l < num_layers; ++l) groups[0].layers.push_back(l);
  std::vector<int> ratios;
  for (const V41Source& s : c.sources) {
    if (std::find(ratios.begin(), ratios.end(), s.ratio) == ratios.end()) ratios.push_back(s.ratio);
  }
  for (int ratio : ratios) {
    KvGroupInfo g{fmt::format("latent/{}", ratio), {}, {}, true};
    for (int l = 0; l < num_layers; ++l) {
      const std::optional<V41Source> s = c.SourceOf(l);
      if (!s || s->ratio != ratio) continue;
      (s->layer == l ? g.layers : g.readers).push_back(l);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

Result<ModelKvShape> ReadDenseKvShape(const gguf::GgufFile& file) {
  ModelKvShape shape;
  KV_ASSIGN_OR_RETURN(shape.architecture, file.GetString("general.architecture"));
  shape.activation_dtype = ModelActivationDType(file);
  const std::string& arch = shape.architecture;
  KV_ASSIGN_OR_RETURN(DenseKvShape dense, IsDenseArchitecture(arch)
                                              ? ReadRunnableDenseShape(file)
                                              : ReadGenericDenseShape(file, arch));
  KV_ASSIGN_OR_RETURN(int context, PositiveIntKey(file, arch + ".context_length"));
  shape.context_length = context;
  shape.num_layers = dense.num_layers;
  shape.layout = std::move(dense);
  return shape;
}

Result<ModelKvShape> ReadV41KvShape(const gguf::GgufFile& file) {
  ModelKvShape shape;
  shape.architecture = kV41Architecture;
  shape.activation_dtype = ModelActivationDType(file);
  KV_ASSIGN_OR_RETURN(V41Config v41, ReadV41Config(file));
  shape.context_length = v41.context_length;
  shape.num_layers = static_cast<int>(v41.num_layers);
  shape.layout = std::move(v41);
  return shape;
}

Result<ModelKvShape> ReadDeepseek2KvShape(const gguf::GgufFile& file) {
  ModelKvShape shape;
  shape.architecture = kDeepseek2Architecture;
  shape.activation_dtype = ModelActivationDType(file);
  KV_ASSIGN_OR_RETURN(Deepseek2Config c, ReadDeepseek2Config(file));
  shape.context_length = c.context_length;
  shape.num_layers = static_cast<int>(c.num_layers);
  shape.layout = LatentKvShape{static_cast<int>(c.num_layers), static_cast<int>(c.latent_dim())};
  return shape;
}

Result<ModelKvShape> ReadModelKvShape(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  if (Result<const Architecture*> entry = FindArchitecture(arch); entry.ok()) {
    return (*entry)->read_kv_shape(file);
  }
  return ReadDenseKvShape(file);  // a dense architecture kvserve cannot run: plan and inspect it
}

Result<ModelKvLayout> MakeModelKvLayout(const ModelKvShape& shape, const KvLayoutOptions& options) {
  const int64_t max_model_len =
      options.max_model_len > 0 ? options.max_model_len : shape.context_length;
  // Parsed for every model so a bad flag is an error; kvserve-v41 keeps its trained formats.
  KV_ASSIGN_OR_RETURN(tensor::DType kv_dtype,
                      kv::ParseKvCacheDType(options.kv_cache_dtype, shape.activation_dtype));
  ModelKvLayout out;
  if (const auto* v41 = std::get_if<V41Config>(&shape.layout)) {
    out.config = MakeV41KvLayout(*v41, options.block_size, max_model_len, options.max_chunk_tokens)
                     .kv_config;
    out.groups = V41GroupInfo(*v41);
  } else if (const auto* mla = std::get_if<LatentKvShape>(&shape.layout)) {
    out.config.num_layers = mla->num_layers;
    out.config.block_size = options.block_size;
    out.config.max_model_len = max_model_len;
    out.config.max_chunk_tokens = options.max_chunk_tokens;
    kv::KvCacheGroup group;
    group.spec = kv::CompressedLatent{mla->latent_dim, 1, 0, kv_dtype};
    KvGroupInfo info{"latent", {}, {}, false};
    for (int l = 0; l < mla->num_layers; ++l) {
      group.layers.push_back(l);
      info.layers.push_back(l);
    }
    out.config.groups.push_back(std::move(group));
    out.groups.push_back(std::move(info));
  } else {
    const DenseKvShape& d = std::get<DenseKvShape>(shape.layout);
    out.config = MakeDenseKvCacheConfig(d, kv_dtype, options.block_size, max_model_len,
                                        options.max_chunk_tokens);
    out.groups = DenseGroupInfo(d);
  }
  KV_RETURN_IF_ERROR(kv::ValidateConfig(out.config).WithContext(shape.architecture));
  return out;
}

Result<ModelKvLayout> MakeModelKvLayout(const gguf::GgufFile& file,
                                        const KvLayoutOptions& options) {
  KV_ASSIGN_OR_RETURN(ModelKvShape shape, ReadModelKvShape(file));
  return MakeModelKvLayout(shape, options);
}

ModelKvLayout AppendLayout(ModelKvLayout first, const ModelKvLayout& second,
                           std::string_view prefix) {
  CHECK_EQ(first.config.block_size, second.config.block_size);
  CHECK_EQ(first.config.max_model_len, second.config.max_model_len);
  const int offset = first.config.num_layers;
  for (kv::KvCacheGroup group : second.config.groups) {
    for (int& layer : group.layers) layer += offset;
    for (kv::KvReader& r : group.readers) {
      r.layer += offset;
      r.source_layer += offset;
    }
    first.config.groups.push_back(std::move(group));
  }
  first.config.num_layers += second.config.num_layers;
  for (KvGroupInfo info : second.groups) {
    info.name = std::string(prefix) + info.name;
    first.groups.push_back(std::move(info));
  }
  return first;
}

std::string WeightsDigest(const gguf::GgufFile& file) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset_withSeed(state, 0x6b7673657276ULL);  // "kvserv"
  for (const gguf::TensorInfo& t : file.tensors()) {
    XXH3_128bits_update(state, t.name.data(), t.name.size());
    uint32_t type = t.ggml_type;
    XXH3_128bits_update(state, &type, sizeof(type));
    for (int64_t d : t.dims) XXH3_128bits_update(state, &d, sizeof(d));
    XXH3_128bits_update(state, t.data, t.size_bytes);
  }
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

kv::ModelFingerprint MakeFingerprint(const gguf::GgufFile& file, std::string_view architecture,
                                     const kv::KvCacheConfig& kv_config) {
  kv::ModelFingerprint fp;
  fp.weights_digest = WeightsDigest(file);
  fp.arch = std::string(architecture);
  fp.kv_formats = kv::DescribeKvFormats(kv_config);
  fp.block_size = kv_config.block_size;
  return fp;
}

}  // namespace kvserve::model
