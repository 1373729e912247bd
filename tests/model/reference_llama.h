// A naive float64 forward pass of a GGUF `llama` model with F32 weights, written for the tests
// only: it shares no code with kernels/ or model/ (its own metadata reading, norm, RoPE,
// attention and softmax, over contiguous per-layer K/V). One token at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::model_test {

class ReferenceLlama {
 public:
  // note: every weight must be F32 (InvalidArgument otherwise).
  static Result<std::unique_ptr<ReferenceLlama>> Create(const gguf::GgufFile& file);

  // Runs `token` at the next position (0, 1, ...) and returns its logits (vocab).
  std::vector<double> Step(int32_t token);

  int64_t vocab_size() const { return vocab_; }

 private:
  struct Layer {
    const float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
  };
  ReferenceLlama() = default;
  // out[r] = sum_c w[r * cols + c] * in[c].
  static void MatVec(const float* w, const std::vector<double>& in, int64_t rows,
                     std::vector<double>& out);
  void Norm(const float* weight, const std::vector<double>& in, std::vector<double>& out) const;
  void RotateHeads(std::vector<double>& x, int64_t heads, int64_t pos) const;
  void Attention(int64_t layer, const std::vector<double>& q, std::vector<double>& out) const;

  int64_t dim_ = 0, layers_n_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, ffn_ = 0;
  int64_t vocab_ = 0, rope_dim_ = 0;
  double eps_ = 1e-5, base_ = 10000, scale_ = 1;
  const float* embd_ = nullptr;
  const float* out_norm_ = nullptr;
  const float* output_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<std::vector<double>> k_cache_, v_cache_;  // per layer: (pos, kv_heads * head_dim)
  int64_t pos_ = 0;
};

}  // namespace kvserve::model_test
