// ModelConfig: the hyperparameters of a GGUF `llama` model, read from its metadata and checked
// against its tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::model {

struct ModelConfig {
  std::string architecture;       // "llama"
  int64_t context_length = 0;     // llama.context_length
  int64_t dim = 0;                // llama.embedding_length
  int64_t num_layers = 0;         // llama.block_count
  int64_t ffn_dim = 0;            // llama.feed_forward_length
  int64_t num_heads = 0;          // llama.attention.head_count
  int64_t num_kv_heads = 0;       // llama.attention.head_count_kv (default num_heads)
  int64_t head_dim = 0;           // dim / num_heads
  int64_t vocab_size = 0;         // rows of token_embd.weight
  float rms_norm_eps = 1e-5f;     // llama.attention.layer_norm_rms_epsilon
  double rope_freq_base = 10000;  // llama.rope.freq_base (default 10000)
  int64_t rope_dim = 0;           // llama.rope.dimension_count (default head_dim)
  double rope_linear_scale = 1;   // llama.rope.scaling.factor when scaling.type is "linear"
  bool tied_output = false;       // no output.weight: logits use token_embd.weight

  int64_t kv_row_elems() const { return num_kv_heads * head_dim; }
};

// Reads and validates the config: InvalidArgument / NotFound naming the key or tensor when
// metadata is missing or inconsistent (heads not dividing dim, kv heads not dividing heads,
// odd or too large rope dim, unsupported rope scaling, a tensor missing or of the wrong shape
// or of a dtype the kernels cannot use).
Result<ModelConfig> ReadModelConfig(const gguf::GgufFile& file);

}  // namespace kvserve::model
