// The mixture-of-experts FFN of the float64 references (reference_dense.cc,
// reference_deepseek2.cc), written for the tests only and sharing no code with model/moe.h:
// router, top-k by a stable sort (ties: the lower expert index first), then each chosen expert
// evaluated on its own, then the shared expert. Every pointer is an F32 tensor of the file.
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve::model_test {

struct ReferenceMoeLayer {
  int64_t dim = 0, experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0;
  bool sigmoid = false;                   // else softmax over the experts
  bool norm_topk = false;                 // chosen weights / their sum
  double weights_scale = 0;               // 0: none
  const float* router = nullptr;          // (experts, dim)
  const float* selection_bias = nullptr;  // (experts) added for the choice only, or null
  const float *gate_exps = nullptr, *up_exps = nullptr;  // (experts, expert_ffn, dim)
  const float* down_exps = nullptr;                      // (experts, dim, expert_ffn)
  const float *gate_shexp = nullptr, *up_shexp = nullptr, *down_shexp = nullptr;  // or null
  const float* shared_gate = nullptr;  // (dim): shared output * sigmoid(shared_gate . n), or null
  // gpt-oss: experts chosen by the raw logits, weighted by a softmax over the chosen ones;
  // biases on the router and on each expert's projections; the clamped SwiGLU
  // min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
  bool softmax_weight = false;
  bool swiglu_oai = false;
  const float* router_bias = nullptr;                    // (experts), or null
  const float *gate_bias = nullptr, *up_bias = nullptr;  // (experts, expert_ffn), or null
  const float* down_bias = nullptr;                      // (experts, dim), or null
};

// out = MoE(n) for the normed input n (dim values).
std::vector<double> ReferenceMoe(const ReferenceMoeLayer& layer, const std::vector<double>& n);

// SwiGLU: down (silu(gate n) * (up n)); gate and up (ffn, n.size()), down (dim, ffn).
std::vector<double> ReferenceSwiglu(const float* gate, const float* up, const float* down,
                                    int64_t ffn, int64_t dim, const std::vector<double>& n);

}  // namespace kvserve::model_test
