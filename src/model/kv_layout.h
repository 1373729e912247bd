// How a model's layers map onto KV cache groups (kv/config.h), and the model's identity for
// prefix hashing. The model declares its KV in kv/'s vocabulary; kv/ itself knows no models.
//
// One source of truth: every kv::KvCacheConfig built for a GGUF model comes from the functions
// below. `kvserve serve` / `generate` / `bench` (engine::ResolveKvLayout), `kvserve inspect`
// and the planner (`kvserve plan --model FILE.gguf`) all reach MakeModelKvLayout, so the
// capacity they print cannot diverge.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kv/config.h"
#include "kv/hash.h"
#include "model/v41_config.h"
#include "tensor/dtype.h"

namespace kvserve::model {

// ---- a dense transformer's KV ----

// A dense transformer's KV shape: K and V rows of num_kv_heads * head_dim values per layer;
// each layer attends to everything or slides over a window of tokens.
struct DenseKvShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::vector<int> layer_windows;  // (num_layers): the layer's sliding window, 0 = full

  // The one-window shape: every layer full (window 0) or sliding over `window`.
  static DenseKvShape Uniform(int num_layers, int num_kv_heads, int head_dim, int window = 0);
};

// The KV cache groups of a dense shape: one per distinct window, the full-attention layers
// first, then the sliding windows in increasing size; layers ascending in each group.
// Example: gemma3 with 8 layers, window 512 (layers 5 global): {full: 5}, {512: 0-4, 6-7}.
struct DenseKvGroup {
  int window = 0;           // 0: full attention
  std::vector<int> layers;  // model layers
};
std::vector<DenseKvGroup> DenseKvGroups(const DenseKvShape& shape);

// The KV cache config of a dense shape, groups as DenseKvGroups: FullAttention or
// SlidingWindow specs of `kv_dtype`.
kv::KvCacheConfig MakeDenseKvCacheConfig(const DenseKvShape& shape, tensor::DType kv_dtype,
                                         int block_size, int64_t max_model_len,
                                         int64_t max_chunk_tokens);

// The dtype of the model's activations for `--kv-cache-dtype auto`: f32 when every weight
// matrix is f32, else f16.
tensor::DType ModelActivationDType(const gguf::GgufFile& file);

// ---- a GGUF model's KV layout from metadata (serve, inspect and the planner) ----

// A multi-head latent attention model's KV shape (deepseek2): every layer writes one latent row
// of latent_dim values per token (kv_lora_rank + the decoupled rope key): one
// CompressedLatent group, compress_ratio 1, no indexer key, no sharing between layers.
struct LatentKvShape {
  int num_layers = 0;
  int latent_dim = 0;
};

// Everything a GGUF model's KV layout depends on, read from metadata only (no tensor bytes;
// any weight dtype, so the planner can read files kvserve cannot run). Plain data, copyable.
struct ModelKvShape {
  std::string architecture;
  int64_t context_length = 0;
  int num_layers = 0;                                    // model layers
  tensor::DType activation_dtype = tensor::DType::kF16;  // what "auto" resolves against
  std::variant<DenseKvShape, V41Config, LatentKvShape> layout;
};

// The architecture's read_kv_shape (model/architecture.h); for an architecture kvserve cannot
// run, ReadDenseKvShape, so the planner and `inspect` still size its KV.
Result<ModelKvShape> ReadModelKvShape(const gguf::GgufFile& file);
// kvserve-v41 (ReadV41Config).
Result<ModelKvShape> ReadV41KvShape(const gguf::GgufFile& file);
// deepseek2 (ReadDeepseek2Config): a LatentKvShape.
Result<ModelKvShape> ReadDeepseek2KvShape(const gguf::GgufFile& file);
// A dense transformer from llama.cpp's keys. For the architectures kvserve runs
// (model/config.h), the KV of their forward pass: head size `.attention.key_length` (default
// embedding_length / head_count) and each layer's window as the architecture places it
// (gemma2: even layers, gemma3: 5 of every 6). For other architectures (planned, not run):
// `{arch}.block_count`, `.attention.head_count`, `.attention.head_count_kv` (default
// head_count), `.embedding_length`, `.attention.key_length`, `.context_length` and an optional
// `.attention.sliding_window` for every layer. InvalidArgument / NotFound naming the key when
// metadata is missing or inconsistent.
Result<ModelKvShape> ReadDenseKvShape(const gguf::GgufFile& file);

// The run's knobs that shape a KV cache config: the serve / plan / inspect flags.
struct KvLayoutOptions {
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype; kvserve-v41 keeps trained formats
  int block_size = 16;                  // --block-size
  int64_t max_model_len = 0;            // --max-model-len; 0: the model's context length
  int64_t max_chunk_tokens = 0;         // --max-num-batched-tokens; 0: whole prompt
};

// A group of `config` named for people, with model layer ids (config's writer and reader ids
// may be KV slots past the model's layers, see V41KvLayout).
struct KvGroupInfo {
  std::string name;          // "full", "sliding", "window", "latent/2"
  std::vector<int> layers;   // model layers that write (own an allocation), ascending
  std::vector<int> readers;  // model layers that only read another layer's KV, ascending
  bool fixed_dtype = false;  // a trained format: --kv-cache-dtype does not apply
};

struct ModelKvLayout {
  kv::KvCacheConfig config;         // what the KV cache manager allocates
  std::vector<KvGroupInfo> groups;  // (config.groups.size())
};

// THE function from a model's KV shape and the run's knobs to its KV cache config.
// InvalidArgument for a bad --kv-cache-dtype or a config kv::ValidateConfig rejects.
Result<ModelKvLayout> MakeModelKvLayout(const ModelKvShape& shape, const KvLayoutOptions& options);
// ReadModelKvShape then MakeModelKvLayout.
Result<ModelKvLayout> MakeModelKvLayout(const gguf::GgufFile& file, const KvLayoutOptions& options);

// Two models in one KV cache (speculative decoding's draft model): `second`'s groups after
// `first`'s, its layer ids (and KV slots) shifted by first.config.num_layers, its group names
// prefixed with `prefix`. note: both have the same block size, max_model_len and chunk size.
ModelKvLayout AppendLayout(ModelKvLayout first, const ModelKvLayout& second,
                           std::string_view prefix);

// ---- identity ----

// xxh3-128 (hex) over every tensor's name, type, dims and bytes, in file order: the weights
// digest that namespaces prefix-cache hashes (and offload files). Reads all weight bytes.
std::string WeightsDigest(const gguf::GgufFile& file);

// The fingerprint of (weights, architecture, KV formats, block size).
kv::ModelFingerprint MakeFingerprint(const gguf::GgufFile& file, std::string_view architecture,
                                     const kv::KvCacheConfig& kv_config);

}  // namespace kvserve::model
