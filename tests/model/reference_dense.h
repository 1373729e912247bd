// A naive float64 forward pass of the dense-attention GGUF architectures kvserve runs (llama,
// qwen2, qwen3, phi3, gemma2, gemma3, and the mixtures of experts qwen2moe, qwen3moe, gpt-oss, their
// experts evaluated one by one in reference_moe.cc) with F32 weights, written for the tests only:
// it shares no code with kernels/ or model/ (its own metadata reading, architecture rules, norms,
// RoPE pairings, attention with windows and soft-capping, GELU, softmax) and keeps K/V per layer in
// plain vectors. One token at a time. What each architecture does is spelled out in Create and
// Step, from llama.cpp's graph builders and the models' published definitions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "reference_moe.h"

namespace kvserve::model_test {

class ReferenceDense {
 public:
  // note: every weight must be F32 (InvalidArgument otherwise). `max_context` is the run's
  // context length (Phi-3 picks its long rope factors above the original context); 0 = the
  // model's.
  static Result<std::unique_ptr<ReferenceDense>> Create(const gguf::GgufFile& file,
                                                        int64_t max_context = 0);

  // Runs `token` at the next position (0, 1, ...) and returns its logits (vocab).
  std::vector<double> Step(int32_t token);

  int64_t vocab_size() const { return vocab_; }

 private:
  struct Layer {
    const float *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wqkv = nullptr,
                *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr,
                *wo = nullptr, *bo = nullptr, *attn_post_norm = nullptr, *ffn_norm = nullptr,
                *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr, *ffn_post_norm = nullptr,
                *sinks = nullptr;
    ReferenceMoeLayer moe;  // used when moe.experts > 0
    int64_t window = 0;     // 0: every earlier position
    double rope_base = 10000, rope_scale = 1;
  };
  ReferenceDense() = default;
  Status ReadShape(const gguf::GgufFile& file, int64_t max_context);
  Status BindLayer(const gguf::GgufFile& file, int64_t l);
  // out[r] = sum_c w[r * cols + c] * in[c] (+ bias[r]).
  static void MatVec(const float* w, const std::vector<double>& in, int64_t rows,
                     std::vector<double>& out, const float* bias = nullptr);
  void Norm(const float* weight, const double* in, double* out, int64_t n) const;
  void NormVector(const float* weight, std::vector<double>& x) const;
  void RotateHeads(const Layer& L, std::vector<double>& x, int64_t heads, int64_t pos) const;
  void Attention(int64_t layer, const std::vector<double>& q, std::vector<double>& out) const;
  void Ffn(const Layer& L, const std::vector<double>& xn, std::vector<double>& out) const;

  std::string arch_;
  int64_t dim_ = 0, layers_n_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, ffn_ = 0;
  int64_t vocab_ = 0, rope_dim_ = 0;
  double eps_ = 1e-5, attn_factor_ = 1, q_scale_ = 1, embed_scale_ = 1;
  double attn_softcap_ = 0, final_softcap_ = 0;  // 0: none
  bool neox_ = false, gelu_ = false;
  double yarn_factor_ = 1;  // gpt-oss's YaRN (1: none)
  int64_t yarn_orig_ = 0;
  ReferenceMoeLayer moe_shape_;          // experts > 0 for a mixture of experts
  const float* rope_factors_ = nullptr;  // (rope_dim / 2) angle divisors, or null
  const float* embd_ = nullptr;
  const float* out_norm_ = nullptr;
  const float* output_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<std::vector<double>> k_cache_, v_cache_;  // per layer: (pos, kv_heads * head_dim)
  int64_t pos_ = 0;
};

}  // namespace kvserve::model_test
