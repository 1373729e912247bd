// A naive float64 forward pass of a GGUF `deepseek2` model with F32 weights, written for the
// tests only: it shares no code with kernels/ or model/ (its own metadata reading, norm, YaRN
// rope, routing and softmax). One token at a time. Attention is the decompressed form: every
// step recomputes each cached token's full per-head K and V from its stored latent
// (k_nope = W_UK c, v = W_UV c), so it checks the model's absorbed decode; the MoE evaluates
// each chosen expert one by one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::model_test {

class ReferenceDeepseek2 {
 public:
  // note: every matrix must be F32 (InvalidArgument otherwise).
  static Result<std::unique_ptr<ReferenceDeepseek2>> Create(const gguf::GgufFile& file);

  // Runs `token` at the next position and returns its logits (vocab).
  std::vector<double> Step(int32_t token);
  int64_t vocab_size() const { return vocab_; }

 private:
  using Vec = std::vector<double>;
  ReferenceDeepseek2() = default;
  const float* Tensor(const std::string& name) const;
  const float* Layer(int64_t l, const std::string& suffix) const;
  static Vec MatVec(const float* w, const Vec& in, int64_t rows);  // w: (rows, in.size())
  Vec Norm(const float* weight, const Vec& in) const;
  void Rope(double* x, int64_t pos) const;  // rope_dim values, adjacent pairs, YaRN angles
  Vec Attention(int64_t l, const Vec& n);
  Vec Moe(int64_t l, const Vec& n) const;

  const gguf::GgufFile* file_ = nullptr;
  int64_t dim_ = 0, layers_ = 0, heads_ = 0, vocab_ = 0, ffn_ = 0, dense_ = 0;
  int64_t q_lora_ = 0, kv_lora_ = 0, nope_ = 0, rope_ = 0, v_dim_ = 0;
  int64_t experts_ = 0, top_k_ = 0, expert_ffn_ = 0, shared_ffn_ = 0, gating_ = 1;
  bool norm_topk_ = false;
  double weights_scale_ = 0, eps_ = 1e-6, base_ = 10000, factor_ = 1, orig_ctx_ = 0,
         mscale_all_dim_ = 0;
  std::vector<std::vector<Vec>> latent_;  // [layer][pos]: [c (kv_lora) | k_pe (rope)]
  int64_t pos_ = 0;
};

}  // namespace kvserve::model_test
