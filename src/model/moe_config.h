// MoeConfig: what a mixture-of-experts FFN layer is made of (model/moe.h runs it), read from
// llama.cpp's metadata keys. Its own header so that model configs (model/config.h,
// model/deepseek2_config.h) can hold one without the block's buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::model {

// llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid, 3 softmax over the chosen experts'
// logits only (SOFTMAX_WEIGHT: gpt-oss; experts chosen by the raw logits).
enum class ExpertGating { kSoftmax = 1, kSigmoid = 2, kSoftmaxWeight = 3 };

// The experts' gated activation: SiLU (SwiGLU), or gpt-oss's clamped SwiGLU
// (kernels::SwigluOaiMul).
enum class ExpertActivation { kSilu, kSwigluOai };

struct MoeConfig {
  int64_t num_experts = 0;     // {arch}.expert_count
  int64_t top_k = 0;           // {arch}.expert_used_count
  int64_t expert_ffn_dim = 0;  // {arch}.expert_feed_forward_length
  int64_t shared_ffn_dim = 0;  // 0: no shared expert; else its FFN width
  bool shared_gate = false;    // qwen2moe: the shared expert's output * sigmoid(gate . n)
  ExpertGating gating = ExpertGating::kSoftmax;
  bool norm_topk = false;       // {arch}.expert_weights_norm
  float weights_scale = 0.0f;   // {arch}.expert_weights_scale; 0: none
  bool selection_bias = false;  // blk.N.exp_probs_b.bias (DeepSeek-V3)
  // gpt-oss: biases on the router (ffn_gate_inp.bias, (E)) and on every expert's projections
  // (ffn_{gate,up}_exps.bias (E, ffn), ffn_down_exps.bias (E, dim)).
  bool biases = false;
  ExpertActivation activation = ExpertActivation::kSilu;
  // The FFN's input norm, blk.N.<norm_tensor>.weight: gpt-oss calls it post_attention_norm.
  std::string norm_tensor = "ffn_norm";
};

// Reads the MoE keys of `arch` (expert_count, expert_used_count, expert_feed_forward_length,
// expert_shared_count / expert_shared_feed_forward_length, expert_gating_func,
// expert_weights_norm, expert_weights_scale). When expert_feed_forward_length is absent and
// `fallback_ffn` is set, the expert FFN is fallback_ffn / expert_used_count (llama.cpp's qwen
// MoE loaders pass feed_forward_length). InvalidArgument naming the key when a count is
// missing or top_k is not in [1, expert_count].
Result<MoeConfig> ReadMoeConfig(const gguf::GgufFile& file, const std::string& arch,
                                std::optional<int64_t> fallback_ffn = std::nullopt);

}  // namespace kvserve::model
