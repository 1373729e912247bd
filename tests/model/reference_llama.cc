#include "reference_llama.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvserve::model_test {
namespace {

Result<const float*> F32Tensor(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return NotFound(name);
  if (t->dtype != tensor::DType::kF32) return InvalidArgument(name + " is not F32");
  return reinterpret_cast<const float*>(t->data);
}

}  // namespace

Result<std::unique_ptr<ReferenceLlama>> ReferenceLlama::Create(const gguf::GgufFile& file) {
  std::unique_ptr<ReferenceLlama> m(new ReferenceLlama());
  KV_ASSIGN_OR_RETURN(m->dim_, file.GetInt("llama.embedding_length"));
  KV_ASSIGN_OR_RETURN(m->layers_n_, file.GetInt("llama.block_count"));
  KV_ASSIGN_OR_RETURN(m->heads_, file.GetInt("llama.attention.head_count"));
  KV_ASSIGN_OR_RETURN(m->kv_heads_, file.GetIntOr("llama.attention.head_count_kv", m->heads_));
  KV_ASSIGN_OR_RETURN(m->ffn_, file.GetInt("llama.feed_forward_length"));
  KV_ASSIGN_OR_RETURN(m->eps_, file.GetFloatOr("llama.attention.layer_norm_rms_epsilon", 1e-5));
  KV_ASSIGN_OR_RETURN(m->base_, file.GetFloatOr("llama.rope.freq_base", 10000.0));
  m->head_dim_ = m->dim_ / m->heads_;
  KV_ASSIGN_OR_RETURN(m->rope_dim_, file.GetIntOr("llama.rope.dimension_count", m->head_dim_));
  KV_ASSIGN_OR_RETURN(std::string scaling, file.GetStringOr("llama.rope.scaling.type", "none"));
  if (scaling == "linear") {
    KV_ASSIGN_OR_RETURN(m->scale_, file.GetFloat("llama.rope.scaling.factor"));
  }
  m->vocab_ = file.FindTensor("token_embd.weight")->dims[1];
  KV_ASSIGN_OR_RETURN(m->embd_, F32Tensor(file, "token_embd.weight"));
  KV_ASSIGN_OR_RETURN(m->out_norm_, F32Tensor(file, "output_norm.weight"));
  m->output_ = m->embd_;
  if (file.FindTensor("output.weight") != nullptr) {
    KV_ASSIGN_OR_RETURN(m->output_, F32Tensor(file, "output.weight"));
  }
  for (int64_t l = 0; l < m->layers_n_; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L{};
    KV_ASSIGN_OR_RETURN(L.attn_norm, F32Tensor(file, p + "attn_norm.weight"));
    KV_ASSIGN_OR_RETURN(L.wq, F32Tensor(file, p + "attn_q.weight"));
    KV_ASSIGN_OR_RETURN(L.wk, F32Tensor(file, p + "attn_k.weight"));
    KV_ASSIGN_OR_RETURN(L.wv, F32Tensor(file, p + "attn_v.weight"));
    KV_ASSIGN_OR_RETURN(L.wo, F32Tensor(file, p + "attn_output.weight"));
    KV_ASSIGN_OR_RETURN(L.ffn_norm, F32Tensor(file, p + "ffn_norm.weight"));
    KV_ASSIGN_OR_RETURN(L.w_gate, F32Tensor(file, p + "ffn_gate.weight"));
    KV_ASSIGN_OR_RETURN(L.w_up, F32Tensor(file, p + "ffn_up.weight"));
    KV_ASSIGN_OR_RETURN(L.w_down, F32Tensor(file, p + "ffn_down.weight"));
    m->layers_.push_back(L);
  }
  m->k_cache_.resize(m->layers_n_);
  m->v_cache_.resize(m->layers_n_);
  return m;
}

void ReferenceLlama::MatVec(const float* w, const std::vector<double>& in, int64_t rows,
                            std::vector<double>& out) {
  const int64_t cols = static_cast<int64_t>(in.size());
  out.assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * in[c];
    out[r] = s;
  }
}

void ReferenceLlama::Norm(const float* weight, const std::vector<double>& in,
                          std::vector<double>& out) const {
  double ss = 0;
  for (double v : in) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(in.size()) + eps_);
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * inv * weight[i];
}

void ReferenceLlama::RotateHeads(std::vector<double>& x, int64_t heads, int64_t pos) const {
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; 2 * i < rope_dim_; ++i) {
      const double angle =
          (static_cast<double>(pos) / scale_) *
          std::pow(base_, -static_cast<double>(2 * i) / static_cast<double>(rope_dim_));
      double& a = x[h * head_dim_ + 2 * i];
      double& b = x[h * head_dim_ + 2 * i + 1];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = a0 * std::sin(angle) + b0 * std::cos(angle);
    }
  }
}

void ReferenceLlama::Attention(int64_t layer, const std::vector<double>& q,
                               std::vector<double>& out) const {
  const int64_t kv_dim = kv_heads_ * head_dim_;
  const int64_t n = pos_ + 1;
  out.assign(dim_, 0.0);
  std::vector<double> w(n);
  for (int64_t h = 0; h < heads_; ++h) {
    const int64_t kvh = h / (heads_ / kv_heads_);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t d = 0; d < head_dim_; ++d) {
        s += q[h * head_dim_ + d] * k_cache_[layer][j * kv_dim + kvh * head_dim_ + d];
      }
      w[j] = s / std::sqrt(static_cast<double>(head_dim_));
    }
    const double mx = *std::max_element(w.begin(), w.end());
    double total = 0;
    for (double& v : w) total += (v = std::exp(v - mx));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t d = 0; d < head_dim_; ++d) {
        out[h * head_dim_ + d] += w[j] / total * v_cache_[layer][j * kv_dim + kvh * head_dim_ + d];
      }
    }
  }
}

std::vector<double> ReferenceLlama::Step(int32_t token) {
  const int64_t kv_dim = kv_heads_ * head_dim_;
  std::vector<double> x(embd_ + token * dim_, embd_ + (token + 1) * dim_);
  std::vector<double> xn, q, k, v, att, proj, gate, up;
  for (int64_t l = 0; l < layers_n_; ++l) {
    const Layer& L = layers_[l];
    Norm(L.attn_norm, x, xn);
    MatVec(L.wq, xn, dim_, q);
    MatVec(L.wk, xn, kv_dim, k);
    MatVec(L.wv, xn, kv_dim, v);
    RotateHeads(q, heads_, pos_);
    RotateHeads(k, kv_heads_, pos_);
    k_cache_[l].insert(k_cache_[l].end(), k.begin(), k.end());
    v_cache_[l].insert(v_cache_[l].end(), v.begin(), v.end());
    Attention(l, q, att);
    MatVec(L.wo, att, dim_, proj);
    for (int64_t i = 0; i < dim_; ++i) x[i] += proj[i];
    Norm(L.ffn_norm, x, xn);
    MatVec(L.w_gate, xn, ffn_, gate);
    MatVec(L.w_up, xn, ffn_, up);
    for (int64_t i = 0; i < ffn_; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    MatVec(L.w_down, gate, dim_, proj);
    for (int64_t i = 0; i < dim_; ++i) x[i] += proj[i];
  }
  Norm(out_norm_, x, xn);
  std::vector<double> logits;
  MatVec(output_, xn, vocab_, logits);
  ++pos_;
  return logits;
}

}  // namespace kvserve::model_test
