#include "reference_deepseek2.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "core/check.h"
#include "reference_moe.h"

namespace kvserve::model_test {
namespace {

int64_t Int(const gguf::GgufFile& f, const std::string& key, int64_t fallback) {
  Result<int64_t> v = f.GetIntOr("deepseek2." + key, fallback);
  CHECK(v.ok()) << key;
  return *v;
}

double Float(const gguf::GgufFile& f, const std::string& key, double fallback) {
  Result<double> v = f.GetFloatOr("deepseek2." + key, fallback);
  CHECK(v.ok()) << key;
  return *v;
}

}  // namespace

Result<std::unique_ptr<ReferenceDeepseek2>> ReferenceDeepseek2::Create(const gguf::GgufFile& f) {
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.ggml_type != 0) return InvalidArgument("the reference needs F32 weights: " + t.name);
  }
  std::unique_ptr<ReferenceDeepseek2> r(new ReferenceDeepseek2());
  r->file_ = &f;
  r->dim_ = Int(f, "embedding_length", 0);
  r->layers_ = Int(f, "block_count", 0);
  r->heads_ = Int(f, "attention.head_count", 0);
  r->ffn_ = Int(f, "feed_forward_length", 0);
  r->dense_ = Int(f, "leading_dense_block_count", 0);
  r->q_lora_ = Int(f, "attention.q_lora_rank", 0);
  r->kv_lora_ = Int(f, "attention.kv_lora_rank", 0);
  r->rope_ = Int(f, "rope.dimension_count", 0);
  r->nope_ = Int(f, "attention.key_length_mla", 0) - r->rope_;
  r->v_dim_ = Int(f, "attention.value_length_mla", 0);
  r->experts_ = Int(f, "expert_count", 0);
  r->top_k_ = Int(f, "expert_used_count", 0);
  r->expert_ffn_ = Int(f, "expert_feed_forward_length", 0);
  r->shared_ffn_ = Int(f, "expert_shared_count", 0) * r->expert_ffn_;
  r->gating_ = Int(f, "expert_gating_func", 1);
  Result<bool> norm = f.GetBoolOr("deepseek2.expert_weights_norm", false);
  r->norm_topk_ = norm.ok() && *norm;
  r->weights_scale_ = Float(f, "expert_weights_scale", 0);
  r->eps_ = Float(f, "attention.layer_norm_rms_epsilon", 1e-6);
  r->base_ = Float(f, "rope.freq_base", 10000);
  Result<std::string> scaling = f.GetStringOr("deepseek2.rope.scaling.type", "none");
  if (scaling.ok() && *scaling == "yarn") {
    r->factor_ = Float(f, "rope.scaling.factor", 1);
    r->orig_ctx_ = static_cast<double>(Int(f, "rope.scaling.original_context_length", 0));
    r->mscale_all_dim_ = Float(f, "rope.scaling.yarn_log_multiplier", 0) / 0.1;
  }
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return InvalidArgument("no token_embd.weight");
  r->vocab_ = embd->dims[1];
  r->latent_.resize(r->layers_);
  return r;
}

const float* ReferenceDeepseek2::Tensor(const std::string& name) const {
  const gguf::TensorInfo* t = file_->FindTensor(name);
  CHECK(t != nullptr) << name;
  return reinterpret_cast<const float*>(t->data);
}

const float* ReferenceDeepseek2::Layer(int64_t l, const std::string& suffix) const {
  return Tensor("blk." + std::to_string(l) + "." + suffix);
}

ReferenceDeepseek2::Vec ReferenceDeepseek2::MatVec(const float* w, const Vec& in, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(in.size());
  Vec out(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r] += static_cast<double>(w[r * cols + c]) * in[c];
  }
  return out;
}

ReferenceDeepseek2::Vec ReferenceDeepseek2::Norm(const float* weight, const Vec& in) const {
  double ss = 0;
  for (double v : in) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(in.size()) + eps_);
  Vec out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * inv * weight[i];
  return out;
}

void ReferenceDeepseek2::Rope(double* x, int64_t pos) const {
  auto corr = [&](double beta) {
    return rope_ * std::log(orig_ctx_ / (beta * 2 * std::numbers::pi)) / (2 * std::log(base_));
  };
  const double low = std::max(0.0, std::floor(corr(32.0)));
  const double high = std::min(static_cast<double>(rope_ - 1), std::ceil(corr(1.0)));
  for (int64_t i = 0; i < rope_ / 2; ++i) {
    const double extrap = static_cast<double>(pos) * std::pow(base_, -2.0 * i / rope_);
    double theta = extrap;
    if (factor_ > 1) {
      const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
      theta = extrap / factor_ * (1 - ramp) + extrap * ramp;
    }
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * std::cos(theta) - b * std::sin(theta);
    x[2 * i + 1] = a * std::sin(theta) + b * std::cos(theta);
  }
}

ReferenceDeepseek2::Vec ReferenceDeepseek2::Attention(int64_t l, const Vec& n) {
  const int64_t qk = nope_ + rope_;
  Vec q = q_lora_ > 0 ? MatVec(Layer(l, "attn_q_b.weight"),
                               Norm(Layer(l, "attn_q_a_norm.weight"),
                                    MatVec(Layer(l, "attn_q_a.weight"), n, q_lora_)),
                               heads_ * qk)
                      : MatVec(Layer(l, "attn_q.weight"), n, heads_ * qk);
  Vec kv = MatVec(Layer(l, "attn_kv_a_mqa.weight"), n, kv_lora_ + rope_);
  Vec c = Norm(Layer(l, "attn_kv_a_norm.weight"), Vec(kv.begin(), kv.begin() + kv_lora_));
  Vec latent = c;
  latent.insert(latent.end(), kv.begin() + kv_lora_, kv.end());
  Rope(latent.data() + kv_lora_, pos_);
  latent_[l].push_back(latent);
  const double mscale = factor_ > 1 ? 1 + 0.1 * mscale_all_dim_ * std::log(factor_) : 1.0;
  const double scale = mscale * mscale / std::sqrt(static_cast<double>(qk));
  const float* k_b = Layer(l, "attn_k_b.weight");  // [h][c][nope]
  const float* v_b = Layer(l, "attn_v_b.weight");  // [h][d][c]
  Vec att(heads_ * v_dim_, 0.0);
  for (int64_t h = 0; h < heads_; ++h) {
    double* qh = q.data() + h * qk;
    Rope(qh + nope_, pos_);
    std::vector<double> scores;
    std::vector<Vec> values;
    for (const Vec& lat : latent_[l]) {  // decompress every cached token's K and V
      double s = 0;
      for (int64_t d = 0; d < nope_; ++d) {
        double k = 0;
        for (int64_t ci = 0; ci < kv_lora_; ++ci)
          k += k_b[(h * kv_lora_ + ci) * nope_ + d] * lat[ci];
        s += qh[d] * k;
      }
      for (int64_t d = 0; d < rope_; ++d) s += qh[nope_ + d] * lat[kv_lora_ + d];
      scores.push_back(s * scale);
      Vec v(v_dim_, 0.0);
      for (int64_t d = 0; d < v_dim_; ++d) {
        for (int64_t ci = 0; ci < kv_lora_; ++ci)
          v[d] += v_b[(h * v_dim_ + d) * kv_lora_ + ci] * lat[ci];
      }
      values.push_back(std::move(v));
    }
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double& s : scores) sum += (s = std::exp(s - mx));
    for (size_t j = 0; j < scores.size(); ++j) {
      for (int64_t d = 0; d < v_dim_; ++d) att[h * v_dim_ + d] += scores[j] / sum * values[j][d];
    }
  }
  return MatVec(Layer(l, "attn_output.weight"), att, dim_);
}

ReferenceDeepseek2::Vec ReferenceDeepseek2::Moe(int64_t l, const Vec& n) const {
  ReferenceMoeLayer m;
  m.dim = dim_;
  m.experts = experts_;
  m.top_k = top_k_;
  m.expert_ffn = expert_ffn_;
  m.shared_ffn = shared_ffn_;
  m.sigmoid = gating_ == 2;
  m.norm_topk = norm_topk_;
  m.weights_scale = weights_scale_;
  m.router = Layer(l, "ffn_gate_inp.weight");
  const std::string bias_name = "blk." + std::to_string(l) + ".exp_probs_b.bias";
  if (file_->FindTensor(bias_name) != nullptr) m.selection_bias = Tensor(bias_name);
  m.gate_exps = Layer(l, "ffn_gate_exps.weight");
  m.up_exps = Layer(l, "ffn_up_exps.weight");
  m.down_exps = Layer(l, "ffn_down_exps.weight");
  if (shared_ffn_ > 0) {
    m.gate_shexp = Layer(l, "ffn_gate_shexp.weight");
    m.up_shexp = Layer(l, "ffn_up_shexp.weight");
    m.down_shexp = Layer(l, "ffn_down_shexp.weight");
  }
  return ReferenceMoe(m, n);
}

std::vector<double> ReferenceDeepseek2::Step(int32_t token) {
  const float* embd = Tensor("token_embd.weight");
  Vec x(embd + static_cast<int64_t>(token) * dim_, embd + (static_cast<int64_t>(token) + 1) * dim_);
  for (int64_t l = 0; l < layers_; ++l) {
    Vec a = Attention(l, Norm(Layer(l, "attn_norm.weight"), x));
    for (int64_t d = 0; d < dim_; ++d) x[d] += a[d];
    Vec n = Norm(Layer(l, "ffn_norm.weight"), x);
    Vec f = l < dense_ ? ReferenceSwiglu(Layer(l, "ffn_gate.weight"), Layer(l, "ffn_up.weight"),
                                         Layer(l, "ffn_down.weight"), ffn_, dim_, n)
                       : Moe(l, n);
    for (int64_t d = 0; d < dim_; ++d) x[d] += f[d];
  }
  ++pos_;
  const gguf::TensorInfo* out = file_->FindTensor("output.weight");
  return MatVec(out != nullptr ? Tensor("output.weight") : embd,
                Norm(Tensor("output_norm.weight"), x), vocab_);
}

}  // namespace kvserve::model_test
