#include "model/kv_layout.h"

#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

namespace kvserve::model {

kv::KvCacheConfig MakeKvCacheConfig(const ModelConfig& config, tensor::DType kv_dtype,
                                    int block_size, int64_t max_model_len,
                                    int64_t max_chunk_tokens) {
  kv::KvCacheConfig kv_config;
  kv_config.num_layers = static_cast<int>(config.num_layers);
  kv_config.block_size = block_size;
  kv_config.max_model_len = max_model_len;
  kv_config.max_chunk_tokens = max_chunk_tokens;
  kv::KvCacheGroup group;
  group.spec = kv::FullAttention{static_cast<int>(config.num_kv_heads),
                                 static_cast<int>(config.head_dim), kv_dtype};
  for (int layer = 0; layer < kv_config.num_layers; ++layer) group.layers.push_back(layer);
  kv_config.groups.push_back(std::move(group));
  return kv_config;
}

tensor::DType ModelActivationDType(const gguf::GgufFile& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.dims.size() >= 2 && t.dtype != tensor::DType::kF32) return tensor::DType::kF16;
  }
  return tensor::DType::kF32;
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

kv::ModelFingerprint MakeFingerprint(const gguf::GgufFile& file, const ModelConfig& config,
                                     const kv::KvCacheConfig& kv_config) {
  kv::ModelFingerprint fp;
  fp.weights_digest = WeightsDigest(file);
  fp.arch = config.architecture;
  fp.kv_formats = kv::DescribeKvFormats(kv_config);
  fp.block_size = kv_config.block_size;
  return fp;
}

}  // namespace kvserve::model
