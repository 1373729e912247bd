// Deepseek2Config: the hyperparameters of a GGUF `deepseek2` model (DeepSeek-V2, V2-Lite, V3
// shapes: multi-head latent attention + mixture of experts), read from llama.cpp's metadata
// keys, and its KV shape: one latent row per token per layer (model/kv_layout.h MlaKvShape).
//
// Metadata (prefix "deepseek2."): block_count, context_length, embedding_length,
// feed_forward_length (the leading dense layers' FFN), leading_dense_block_count,
// attention.head_count, attention.head_count_kv (1 in MLA files), attention.q_lora_rank
// (0 / absent: a plain Wq), attention.kv_lora_rank, attention.key_length (kv_lora_rank +
// rope dim) and value_length (kv_lora_rank) of the absorbed form, attention.key_length_mla
// (qk nope + rope dim) and value_length_mla (v head dim), attention.layer_norm_rms_epsilon,
// rope.dimension_count, rope.freq_base, rope.scaling.{type (yarn), factor,
// original_context_length, yarn_log_multiplier}, the MoE keys (model/moe.h), vocab_size (only
// when the file has no token_embd.weight).
//
// Tensors (llama.cpp names, MLA-split form): attn_q or attn_q_a + attn_q_a_norm + attn_q_b,
// attn_kv_a_mqa (dim -> kv_lora_rank + rope), attn_kv_a_norm, attn_k_b {nope, kv_lora_rank,
// heads}, attn_v_b {kv_lora_rank, v_dim, heads}, attn_output; dense ffn_* or MoE tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/rope_yarn.h"
#include "model/moe.h"
#include "tensor/dtype.h"

namespace kvserve::model {

inline constexpr const char* kDeepseek2Architecture = "deepseek2";

struct Deepseek2Config {
  std::string architecture = kDeepseek2Architecture;
  int64_t context_length = 0;
  int64_t dim = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t num_heads = 0;
  int64_t ffn_dim = 0;        // leading dense layers
  int64_t leading_dense = 0;  // layers [0, leading_dense) are dense, the rest MoE
  int64_t q_lora_rank = 0;    // 0: q = Wq n
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;    // per head, without rope
  int64_t rope_dim = 0;    // per head, decoupled rope part (shared key)
  int64_t v_head_dim = 0;  // per head
  float rms_norm_eps = 1e-6f;
  double rope_freq_base = 10000;
  kernels::YarnParams yarn;   // factor 1: no scaling
  double mscale_all_dim = 0;  // yarn_log_multiplier / 0.1
  MoeConfig moe;
  bool tied_output = false;
  bool has_weights = false;  // false for shape-only files (inspect, plan)

  int64_t latent_dim() const { return kv_lora_rank + rope_dim; }
  int64_t qk_head_dim() const { return nope_dim + rope_dim; }
  bool IsMoeLayer(int64_t layer) const { return layer >= leading_dense; }
};

// Metadata -> config, checked (positive dims, rope dim even, latent dim a multiple of 32, MoE
// keys); with weights present every tensor's shape and dtype is checked too. InvalidArgument
// naming the key or tensor otherwise; a file with only the unsplit attn_kv_b (older
// conversions) is refused with a message saying so.
Result<Deepseek2Config> ReadDeepseek2Config(const gguf::GgufFile& file);

// What a plain (decompressed) K/V cache of the same model would store per token, for people
// to set beside the latent's bytes:
//   V2-Lite F16: "plain K/V cache would be 27 layers x 16 heads x (192 K + 128 V) dims x 2 B =
//   276480 B per token" (the latent: 27 layers x 576 dims x 2 B = 31104 B).
std::string DescribeDeepseek2PlainKv(const Deepseek2Config& config, tensor::DType dtype);

}  // namespace kvserve::model
