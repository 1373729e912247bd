// How a model's layers map onto KV cache groups (kv/config.h), and the model's identity for
// prefix hashing. The model declares its KV in kv/'s vocabulary; kv/ itself knows no models.
#pragma once

#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kv/config.h"
#include "kv/hash.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace kvserve::model {

// llama: one FullAttention group holding every layer, K and V rows of
// num_kv_heads * head_dim values in `kv_dtype`.
kv::KvCacheConfig MakeKvCacheConfig(const ModelConfig& config, tensor::DType kv_dtype,
                                    int block_size, int64_t max_model_len,
                                    int64_t max_chunk_tokens);

// The dtype of the model's activations for `--kv-cache-dtype auto`: f32 when every weight
// matrix is f32, else f16.
tensor::DType ModelActivationDType(const gguf::GgufFile& file);

// xxh3-128 (hex) over every tensor's name, type, dims and bytes, in file order: the weights
// digest that namespaces prefix-cache hashes (and offload files). Reads all weight bytes.
std::string WeightsDigest(const gguf::GgufFile& file);

// The fingerprint of (weights, architecture, KV formats, block size).
kv::ModelFingerprint MakeFingerprint(const gguf::GgufFile& file, const ModelConfig& config,
                                     const kv::KvCacheConfig& kv_config);

}  // namespace kvserve::model
