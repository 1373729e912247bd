// Model-like KV configs shared by the kv tests.
#pragma once

#include <numeric>
#include <string>
#include <utility>

#include "kv/config.h"
#include "kv/hash.h"

namespace kvserve::kv::testing {

// A model fingerprint for a test manager over `config` (KvCacheManagerOptions::fingerprint).
inline ModelFingerprint TestFingerprint(const KvCacheConfig& config,
                                        std::string weights_digest = "test") {
  return {.weights_digest = std::move(weights_digest),
          .arch = "test",
          .kv_formats = DescribeKvFormats(config),
          .block_size = config.block_size};
}

// One full-attention group over `num_layers` layers.
inline KvCacheConfig DenseConfig(int num_layers, int kv_heads, int head_dim, tensor::DType dtype,
                                 int block_size = 16, int64_t max_model_len = 512) {
  KvCacheConfig config;
  config.num_layers = num_layers;
  config.block_size = block_size;
  config.max_model_len = max_model_len;
  KvCacheGroup group;
  group.spec = FullAttention{kv_heads, head_dim, dtype};
  group.layers.resize(num_layers);
  std::iota(group.layers.begin(), group.layers.end(), 0);
  config.groups.push_back(group);
  return config;
}

// stories260K: 5 layers, 4 kv heads, head_dim 8.
inline KvCacheConfig Stories260K(tensor::DType dtype) {
  return DenseConfig(5, 4, 8, dtype);
}

// V4.1-like hybrid (44 layers): 40 sliding-window layers (window 128, one shared 512-dim FP8
// row per token = 528 B), latent layers 40..42 (ratio 2) and 43 (ratio 1) with 512-dim
// FP4/E4M3-16 latents (288 B) + 128-dim FP4/E8M0-32 index keys (68 B) = 356 B entries.
// Layers 40 and 41 are writers of the ratio-2 group, 42 reads 41's entries.
inline KvCacheConfig V41Like(int block_size = 16, int64_t max_model_len = 8192) {
  using tensor::DType;
  KvCacheConfig config;
  config.num_layers = 44;
  config.block_size = block_size;
  config.max_model_len = max_model_len;
  KvCacheGroup sliding;
  sliding.spec = SlidingWindow{128, 1, 512, DType::kFP8_E4M3_E8M0_32, /*shared_kv=*/true};
  for (int l = 0; l < 40; ++l) sliding.layers.push_back(l);
  const CompressedLatent latent{512, 2, 128, DType::kFP4_E2M1_E4M3_16, DType::kFP4_E2M1_E8M0_32};
  KvCacheGroup ratio2{latent, {40, 41}, {{42, 41}}};
  CompressedLatent latent1 = latent;
  latent1.compress_ratio = 1;
  KvCacheGroup ratio1{latent1, {43}, {}};
  config.groups = {sliding, ratio2, ratio1};
  return config;
}

// Small hybrid for hit-rule tests: layer 0 full, layer 1 sliding (window), f32, 1 x 4 dims.
inline KvCacheConfig SmallHybrid(int block_size, int window, int64_t max_model_len = 64) {
  KvCacheConfig config;
  config.num_layers = 2;
  config.block_size = block_size;
  config.max_model_len = max_model_len;
  config.groups.push_back({FullAttention{1, 4, tensor::DType::kF32}, {0}, {}});
  config.groups.push_back({SlidingWindow{window, 1, 4, tensor::DType::kF32}, {1}, {}});
  return config;
}

}  // namespace kvserve::kv::testing
