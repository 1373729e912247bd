// ModelConfig: the hyperparameters of a GGUF transformer with plain (multi-head / grouped)
// attention (llama, qwen2, qwen3, phi3, gemma2, gemma3, and the mixtures of experts qwen2moe,
// qwen3moe), read from llama.cpp's metadata keys and checked against its tensors. "Dense" in
// the names below means dense attention; the FFN is dense or a mixture of experts.
//
// Every architecture is the same stack of blocks (model/layers.h); what differs is recorded
// here, one reader per architecture (config.cc), following llama.cpp's conventions:
//   llama   normal (adjacent-pair) RoPE, optional rope_freqs.weight (Llama 3.x scaling),
//           optional q/k/v/o biases
//   qwen2   NEOX RoPE, q/k/v biases
//   qwen3   NEOX RoPE, per-head q/k RMSNorm
//   phi3    NEOX RoPE, fused QKV (or separate), fused gate|up, long/short rope factors and
//           rope.scaling.attn_factor; its sliding window is ignored, as llama.cpp does
//   gemma2  NEOX RoPE, GELU-tanh FFN, post-attention and post-FFN norms, embeddings x sqrt(dim),
//           attention and final logit soft-capping, sliding window on even layers
//   gemma3  gemma2's blocks without soft-capping, q/k norms, 5 sliding layers : 1 global,
//           sliding layers with RoPE base 10000 and no scaling
//   qwen2moe qwen2's attention (q/k/v biases when present) and a mixture of experts on every
//           layer: softmax router, top-k not normalised, one shared expert whose output is
//           scaled by sigmoid(ffn_gate_inp_shexp . n) (model/moe.h)
//   qwen3moe qwen3's attention and a mixture of experts on every layer: softmax router, top-k
//           weights normalised to sum 1 (llama.cpp's graph does so whatever the metadata)
//   gpt-oss (llama.cpp LLM_ARCH_OPENAI_MOE) NEOX RoPE with YaRN scaling, q/k/v/o biases,
//           attention sinks (blk.N.attn_sinks.weight, one logit per query head), a 128-token
//           sliding window on even layers (full attention on odd ones), and on every layer a
//           mixture of experts: router with bias, experts chosen by logit and weighted by a
//           softmax over the chosen ones, expert biases, the clamped SwiGLU (alpha 1.702,
//           limit 7); its FFN norm is named post_attention_norm
// Gemma's RMSNorm (1 + w) is already folded into the weights by llama.cpp's converter, so
// every norm here is RMSNorm(x) * w.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/ops.h"
#include "model/moe_config.h"

namespace kvserve::model {

enum class FfnActivation { kSilu, kGeluTanh };  // gate activation of the gated FFN

struct ModelConfig {
  std::string architecture;    // general.architecture
  int64_t context_length = 0;  // {arch}.context_length
  int64_t dim = 0;             // {arch}.embedding_length
  int64_t num_layers = 0;      // {arch}.block_count
  int64_t ffn_dim = 0;         // {arch}.feed_forward_length
  int64_t num_heads = 0;       // {arch}.attention.head_count
  int64_t num_kv_heads = 0;    // {arch}.attention.head_count_kv (default num_heads)
  int64_t head_dim = 0;        // {arch}.attention.key_length (default dim / num_heads)
  int64_t vocab_size = 0;      // rows of token_embd.weight
  float rms_norm_eps = 1e-5f;  // {arch}.attention.layer_norm_rms_epsilon

  // Rotary embedding (kernels/cpu/ops.h).
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNormal;
  int64_t rope_dim = 0;                   // {arch}.rope.dimension_count (default head_dim)
  double rope_freq_base = 10000;          // {arch}.rope.freq_base: full-attention layers
  double rope_linear_scale = 1;           // rope.scaling.factor when scaling.type is "linear"
  double rope_freq_base_sliding = 10000;  // sliding-window layers (gemma3: 10000)
  double rope_linear_scale_sliding = 1;   // sliding-window layers (gemma3: 1)
  double rope_attn_factor = 1;            // {arch}.rope.scaling.attn_factor
  // Tensors of per-pair angle divisors (rope_dim / 2 F32 values): rope_freqs.weight (llama),
  // or phi3's rope_factors_short / _long, the long ones when the run's context exceeds
  // rope_original_context. Empty: none.
  std::string rope_factors_short, rope_factors_long;
  int64_t rope_original_context = 0;  // {arch}.rope.scaling.original_context_length
  // rope.scaling.type "yarn": factor, original context, beta_fast / beta_slow (factor 1: none).
  kernels::YarnParams yarn;

  // Attention.
  float attention_scale = 1.0f;       // multiplies q . k
  std::optional<float> attn_softcap;  // {arch}.attn_logit_softcapping (gemma2)
  std::vector<int32_t> layer_window;  // (num_layers): sliding window of each layer, 0 = full
  bool qkv_bias = false;              // blk.N.attn_{q,k,v}.bias
  bool output_bias = false;           // blk.N.attn_output.bias
  bool qk_norm = false;               // blk.N.attn_{q,k}_norm.weight: (head_dim) per head
  bool fused_qkv = false;             // blk.N.attn_qkv.weight: rows q | k | v
  bool attn_sinks = false;            // blk.N.attn_sinks.weight: (num_heads) sink logits

  // FFN and the rest.
  FfnActivation activation = FfnActivation::kSilu;
  bool fused_gate_up = false;          // blk.N.ffn_up.weight holds gate | up (2 * ffn_dim rows)
  bool post_norms = false;             // blk.N.post_attention_norm / post_ffw_norm on block outputs
  float embedding_scale = 1.0f;        // x = token_embd[token] * embedding_scale
  std::optional<float> final_softcap;  // {arch}.final_logit_softcapping (gemma2)
  bool tied_output = false;            // no output.weight: logits use token_embd.weight
  // Set for the mixtures of experts: every layer's FFN is MoE (model/moe.h) and ffn_dim is
  // only metadata (the shared expert's default width).
  std::optional<MoeConfig> moe;

  int64_t q_row_elems() const { return num_heads * head_dim; }
  int64_t kv_row_elems() const { return num_kv_heads * head_dim; }
  bool IsSliding(int64_t layer) const { return layer_window[layer] > 0; }
};

// True for the architectures ReadModelConfig reads.
bool IsDenseArchitecture(std::string_view architecture);

// The hyperparameters from metadata alone (no tensor is read or checked, so any weight type
// works: the planner and `inspect` use this). InvalidArgument / NotFound naming the key when
// metadata is missing or inconsistent (heads not dividing dim, kv heads not dividing heads, odd
// or too large rope dim, unsupported rope scaling); Unimplemented for an architecture that is
// not dense. vocab_size and the tensor-derived flags are left unset.
Result<ModelConfig> ReadModelHyperparameters(const gguf::GgufFile& file);

// ReadModelHyperparameters, then the tensors: the flags they imply (tied output, biases, fused
// projections) and their presence, shapes and dtypes (InvalidArgument naming the tensor; a
// file with no tensors at all, a shape-only preset for plan and inspect, is refused saying so).
Result<ModelConfig> ReadModelConfig(const gguf::GgufFile& file);

}  // namespace kvserve::model
