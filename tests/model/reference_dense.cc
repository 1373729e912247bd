#include "reference_dense.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvserve::model_test {
namespace {

// An F32 tensor, or null when absent (`required` makes absence an error).
Result<const float*> F32Tensor(const gguf::GgufFile& file, const std::string& name,
                               bool required = true) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    if (required) return NotFound(name);
    return static_cast<const float*>(nullptr);
  }
  if (t->dtype != tensor::DType::kF32) return InvalidArgument(name + " is not F32");
  return reinterpret_cast<const float*>(t->data);
}

}  // namespace

Status ReferenceDense::ReadShape(const gguf::GgufFile& file, int64_t max_context) {
  KV_ASSIGN_OR_RETURN(arch_, file.GetString("general.architecture"));
  const std::string a = arch_ + ".";
  KV_ASSIGN_OR_RETURN(dim_, file.GetInt(a + "embedding_length"));
  KV_ASSIGN_OR_RETURN(layers_n_, file.GetInt(a + "block_count"));
  KV_ASSIGN_OR_RETURN(heads_, file.GetInt(a + "attention.head_count"));
  KV_ASSIGN_OR_RETURN(kv_heads_, file.GetIntOr(a + "attention.head_count_kv", heads_));
  KV_ASSIGN_OR_RETURN(ffn_, file.GetInt(a + "feed_forward_length"));
  KV_ASSIGN_OR_RETURN(eps_, file.GetFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-5));
  KV_ASSIGN_OR_RETURN(head_dim_, file.GetIntOr(a + "attention.key_length", dim_ / heads_));
  KV_ASSIGN_OR_RETURN(rope_dim_, file.GetIntOr(a + "rope.dimension_count", head_dim_));
  KV_ASSIGN_OR_RETURN(double base, file.GetFloatOr(a + "rope.freq_base", 10000.0));
  KV_ASSIGN_OR_RETURN(std::string scaling, file.GetStringOr(a + "rope.scaling.type", "none"));
  double scale = 1;
  if (scaling == "linear") {
    KV_ASSIGN_OR_RETURN(scale, file.GetFloat(a + "rope.scaling.factor"));
  } else if (scaling == "yarn") {
    KV_ASSIGN_OR_RETURN(yarn_factor_, file.GetFloat(a + "rope.scaling.factor"));
    KV_ASSIGN_OR_RETURN(yarn_orig_, file.GetInt(a + "rope.scaling.original_context_length"));
  }
  KV_ASSIGN_OR_RETURN(attn_factor_, file.GetFloatOr(a + "rope.scaling.attn_factor", 1.0));
  KV_ASSIGN_OR_RETURN(int64_t context, file.GetInt(a + "context_length"));
  KV_ASSIGN_OR_RETURN(int64_t original,
                      file.GetIntOr(a + "rope.scaling.original_context_length", context));
  // Pairs: llama rotates (2i, 2i+1); the others (i, i + rope_dim/2).
  neox_ = arch_ != "llama";
  const bool gemma = arch_ == "gemma2" || arch_ == "gemma3";
  gelu_ = gemma;
  embed_scale_ = gemma ? std::sqrt(static_cast<double>(static_cast<float>(dim_))) : 1.0;
  const int64_t layers_27b = arch_ == "gemma2" ? 46 : 62;
  q_scale_ = 1.0 / std::sqrt(static_cast<double>(gemma && layers_n_ == layers_27b ? dim_ / heads_
                                                                                  : head_dim_));
  int64_t window = 0;
  if (arch_ == "gemma2") {
    KV_ASSIGN_OR_RETURN(attn_softcap_, file.GetFloatOr("gemma2.attn_logit_softcapping", 50.0));
    KV_ASSIGN_OR_RETURN(final_softcap_, file.GetFloatOr("gemma2.final_logit_softcapping", 30.0));
    KV_ASSIGN_OR_RETURN(window, file.GetIntOr("gemma2.attention.sliding_window", 4096));
  } else if (arch_ == "gemma3" || arch_ == "gpt-oss") {
    KV_ASSIGN_OR_RETURN(window, file.GetInt(arch_ + ".attention.sliding_window"));
  }
  const bool gpt_oss = arch_ == "gpt-oss";
  if (arch_ == "qwen2moe" || arch_ == "qwen3moe" || gpt_oss) {  // llama.cpp's MoE graphs
    ReferenceMoeLayer& m = moe_shape_;
    m.dim = dim_;
    KV_ASSIGN_OR_RETURN(m.experts, file.GetInt(a + "expert_count"));
    KV_ASSIGN_OR_RETURN(m.top_k, file.GetInt(a + "expert_used_count"));
    KV_ASSIGN_OR_RETURN(m.expert_ffn,
                        file.GetIntOr(a + "expert_feed_forward_length", ffn_ / m.top_k));
    // qwen2moe: one shared expert gated by a sigmoid, weights not normalised; qwen3moe: no
    // shared expert, top-k weights normalised to sum 1.
    if (arch_ == "qwen2moe") {
      KV_ASSIGN_OR_RETURN(m.shared_ffn,
                          file.GetIntOr(a + "expert_shared_feed_forward_length", ffn_));
    }
    m.norm_topk = arch_ == "qwen3moe";
    m.softmax_weight = m.swiglu_oai = gpt_oss;  // gpt-oss: see reference_moe.h
  }
  layers_.resize(layers_n_);
  for (int64_t l = 0; l < layers_n_; ++l) {
    Layer& L = layers_[l];
    // gemma2: every even layer slides; gemma3: five of every six, with RoPE base 10000, no scale.
    // gpt-oss: even layers slide.
    const bool sliding =
        ((arch_ == "gemma2" || gpt_oss) && l % 2 == 0) || (arch_ == "gemma3" && l % 6 != 5);
    L.window = sliding ? window : 0;
    L.rope_base = sliding && arch_ == "gemma3" ? 10000.0 : base;
    L.rope_scale = sliding && arch_ == "gemma3" ? 1.0 : scale;
  }
  KV_ASSIGN_OR_RETURN(rope_factors_, F32Tensor(file, "rope_freqs.weight", false));
  if (rope_factors_ == nullptr) {  // Phi-3: long factors when the run outgrows the original
    const int64_t run_context = max_context > 0 ? max_context : context;
    KV_ASSIGN_OR_RETURN(
        rope_factors_,
        F32Tensor(file,
                  run_context > original ? "rope_factors_long.weight" : "rope_factors_short.weight",
                  false));
  }
  return Status::Ok();
}

Status ReferenceDense::BindLayer(const gguf::GgufFile& file, int64_t l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  Layer& L = layers_[l];
  KV_ASSIGN_OR_RETURN(L.attn_norm, F32Tensor(file, p + "attn_norm.weight"));
  KV_ASSIGN_OR_RETURN(L.wqkv, F32Tensor(file, p + "attn_qkv.weight", false));
  if (L.wqkv == nullptr) {
    KV_ASSIGN_OR_RETURN(L.wq, F32Tensor(file, p + "attn_q.weight"));
    KV_ASSIGN_OR_RETURN(L.wk, F32Tensor(file, p + "attn_k.weight"));
    KV_ASSIGN_OR_RETURN(L.wv, F32Tensor(file, p + "attn_v.weight"));
  }
  KV_ASSIGN_OR_RETURN(L.bq, F32Tensor(file, p + "attn_q.bias", false));
  KV_ASSIGN_OR_RETURN(L.bk, F32Tensor(file, p + "attn_k.bias", false));
  KV_ASSIGN_OR_RETURN(L.bv, F32Tensor(file, p + "attn_v.bias", false));
  KV_ASSIGN_OR_RETURN(L.q_norm, F32Tensor(file, p + "attn_q_norm.weight", false));
  KV_ASSIGN_OR_RETURN(L.k_norm, F32Tensor(file, p + "attn_k_norm.weight", false));
  KV_ASSIGN_OR_RETURN(L.wo, F32Tensor(file, p + "attn_output.weight"));
  KV_ASSIGN_OR_RETURN(L.bo, F32Tensor(file, p + "attn_output.bias", false));
  KV_ASSIGN_OR_RETURN(L.sinks, F32Tensor(file, p + "attn_sinks.weight", false));
  if (arch_ == "gpt-oss") {  // its FFN norm is named post_attention_norm; no post-norms
    KV_ASSIGN_OR_RETURN(L.ffn_norm, F32Tensor(file, p + "post_attention_norm.weight"));
  } else {
    KV_ASSIGN_OR_RETURN(L.attn_post_norm, F32Tensor(file, p + "post_attention_norm.weight", false));
    KV_ASSIGN_OR_RETURN(L.ffn_norm, F32Tensor(file, p + "ffn_norm.weight"));
  }
  if (moe_shape_.experts > 0) {
    ReferenceMoeLayer& m = L.moe;
    m = moe_shape_;
    KV_ASSIGN_OR_RETURN(m.router, F32Tensor(file, p + "ffn_gate_inp.weight"));
    if (m.softmax_weight) {  // gpt-oss's biases
      KV_ASSIGN_OR_RETURN(m.router_bias, F32Tensor(file, p + "ffn_gate_inp.bias"));
      KV_ASSIGN_OR_RETURN(m.gate_bias, F32Tensor(file, p + "ffn_gate_exps.bias"));
      KV_ASSIGN_OR_RETURN(m.up_bias, F32Tensor(file, p + "ffn_up_exps.bias"));
      KV_ASSIGN_OR_RETURN(m.down_bias, F32Tensor(file, p + "ffn_down_exps.bias"));
    }
    KV_ASSIGN_OR_RETURN(m.gate_exps, F32Tensor(file, p + "ffn_gate_exps.weight"));
    KV_ASSIGN_OR_RETURN(m.up_exps, F32Tensor(file, p + "ffn_up_exps.weight"));
    KV_ASSIGN_OR_RETURN(m.down_exps, F32Tensor(file, p + "ffn_down_exps.weight"));
    if (m.shared_ffn > 0) {
      KV_ASSIGN_OR_RETURN(m.shared_gate, F32Tensor(file, p + "ffn_gate_inp_shexp.weight"));
      KV_ASSIGN_OR_RETURN(m.gate_shexp, F32Tensor(file, p + "ffn_gate_shexp.weight"));
      KV_ASSIGN_OR_RETURN(m.up_shexp, F32Tensor(file, p + "ffn_up_shexp.weight"));
      KV_ASSIGN_OR_RETURN(m.down_shexp, F32Tensor(file, p + "ffn_down_shexp.weight"));
    }
    return Status::Ok();
  }
  KV_ASSIGN_OR_RETURN(L.w_gate, F32Tensor(file, p + "ffn_gate.weight", false));  // null: fused
  KV_ASSIGN_OR_RETURN(L.w_up, F32Tensor(file, p + "ffn_up.weight"));
  KV_ASSIGN_OR_RETURN(L.w_down, F32Tensor(file, p + "ffn_down.weight"));
  KV_ASSIGN_OR_RETURN(L.ffn_post_norm, F32Tensor(file, p + "post_ffw_norm.weight", false));
  return Status::Ok();
}

Result<std::unique_ptr<ReferenceDense>> ReferenceDense::Create(const gguf::GgufFile& file,
                                                               int64_t max_context) {
  std::unique_ptr<ReferenceDense> m(new ReferenceDense());
  KV_RETURN_IF_ERROR(m->ReadShape(file, max_context));
  m->vocab_ = file.FindTensor("token_embd.weight")->dims[1];
  KV_ASSIGN_OR_RETURN(m->embd_, F32Tensor(file, "token_embd.weight"));
  KV_ASSIGN_OR_RETURN(m->out_norm_, F32Tensor(file, "output_norm.weight"));
  KV_ASSIGN_OR_RETURN(m->output_, F32Tensor(file, "output.weight", false));
  if (m->output_ == nullptr) m->output_ = m->embd_;  // tied
  for (int64_t l = 0; l < m->layers_n_; ++l) KV_RETURN_IF_ERROR(m->BindLayer(file, l));
  m->k_cache_.resize(m->layers_n_);
  m->v_cache_.resize(m->layers_n_);
  return m;
}

void ReferenceDense::MatVec(const float* w, const std::vector<double>& in, int64_t rows,
                            std::vector<double>& out, const float* bias) {
  const int64_t cols = static_cast<int64_t>(in.size());
  out.assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = bias != nullptr ? bias[r] : 0.0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * in[c];
    out[r] = s;
  }
}

void ReferenceDense::Norm(const float* weight, const double* in, double* out, int64_t n) const {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += in[i] * in[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps_);
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * inv * weight[i];
}

void ReferenceDense::NormVector(const float* weight, std::vector<double>& x) const {
  Norm(weight, x.data(), x.data(), static_cast<int64_t>(x.size()));
}

void ReferenceDense::RotateHeads(const Layer& L, std::vector<double>& x, int64_t heads,
                                 int64_t pos) const {
  const int64_t half = rope_dim_ / 2;
  // YaRN (ggml's rope_yarn with ext_factor 1): pair i blends the angle divided by the factor
  // and the plain one by a ramp between the pairs whose wavelengths fit beta_fast = 32 and
  // beta_slow = 1 times into the original context; the magnitude grows by 0.1 ln(factor).
  double low = 0, high = 0, magnitude = attn_factor_;
  if (yarn_factor_ > 1) {
    auto corr = [&](double beta) {
      return rope_dim_ * std::log(yarn_orig_ / (beta * 2 * 3.14159265358979323846)) /
             (2 * std::log(L.rope_base));
    };
    low = std::max(0.0, std::floor(corr(32)));
    high = std::min(static_cast<double>(rope_dim_ - 1), std::ceil(corr(1)));
    magnitude *= 1 + 0.1 * std::log(yarn_factor_);
  }
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      double angle = (static_cast<double>(pos) / L.rope_scale) *
                     std::pow(L.rope_base, -static_cast<double>(2 * i) / rope_dim_);
      if (rope_factors_ != nullptr) angle /= rope_factors_[i];
      if (yarn_factor_ > 1) {
        const double ramp = 1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
        angle = angle / yarn_factor_ * (1 - ramp) + angle * ramp;
      }
      double& a = x[h * head_dim_ + (neox_ ? i : 2 * i)];
      double& b = x[h * head_dim_ + (neox_ ? i + half : 2 * i + 1)];
      const double a0 = a, b0 = b;
      const double c = std::cos(angle) * magnitude, s = std::sin(angle) * magnitude;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  }
}

void ReferenceDense::Attention(int64_t layer, const std::vector<double>& q,
                               std::vector<double>& out) const {
  const int64_t kv_dim = kv_heads_ * head_dim_;
  const int64_t window = layers_[layer].window;
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos_ - window + 1) : 0;
  out.assign(heads_ * head_dim_, 0.0);
  std::vector<double> w(pos_ + 1);
  for (int64_t h = 0; h < heads_; ++h) {
    const int64_t kvh = h / (heads_ / kv_heads_);
    for (int64_t j = first; j <= pos_; ++j) {
      double s = 0;
      for (int64_t d = 0; d < head_dim_; ++d) {
        s += q[h * head_dim_ + d] * k_cache_[layer][j * kv_dim + kvh * head_dim_ + d];
      }
      s *= q_scale_;
      if (attn_softcap_ > 0) s = attn_softcap_ * std::tanh(s / attn_softcap_);
      w[j] = s;
    }
    // gpt-oss's sink: one more term of the denominator, with no value.
    const float* sinks = layers_[layer].sinks;
    double mx = *std::max_element(w.begin() + first, w.end());
    if (sinks != nullptr) mx = std::max(mx, static_cast<double>(sinks[h]));
    double total = sinks != nullptr ? std::exp(sinks[h] - mx) : 0;
    for (int64_t j = first; j <= pos_; ++j) total += (w[j] = std::exp(w[j] - mx));
    for (int64_t j = first; j <= pos_; ++j) {
      for (int64_t d = 0; d < head_dim_; ++d) {
        out[h * head_dim_ + d] += w[j] / total * v_cache_[layer][j * kv_dim + kvh * head_dim_ + d];
      }
    }
  }
}

void ReferenceDense::Ffn(const Layer& L, const std::vector<double>& xn,
                         std::vector<double>& out) const {
  if (L.moe.experts > 0) {
    out = ReferenceMoe(L.moe, xn);
    return;
  }
  std::vector<double> gate, up;
  if (L.w_gate != nullptr) {
    MatVec(L.w_gate, xn, ffn_, gate);
    MatVec(L.w_up, xn, ffn_, up);
  } else {  // Phi-3: one matrix, gate rows then up rows
    std::vector<double> both;
    MatVec(L.w_up, xn, 2 * ffn_, both);
    gate.assign(both.begin(), both.begin() + ffn_);
    up.assign(both.begin() + ffn_, both.end());
  }
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < ffn_; ++i) {
    const double g = gate[i];
    const double act = gelu_ ? 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)))
                             : g / (1.0 + std::exp(-g));
    gate[i] = act * up[i];
  }
  MatVec(L.w_down, gate, dim_, out);
  if (L.ffn_post_norm != nullptr) NormVector(L.ffn_post_norm, out);
}

std::vector<double> ReferenceDense::Step(int32_t token) {
  const int64_t q_dim = heads_ * head_dim_, kv_dim = kv_heads_ * head_dim_;
  std::vector<double> x(dim_);
  for (int64_t i = 0; i < dim_; ++i) x[i] = embd_[token * dim_ + i] * embed_scale_;
  std::vector<double> xn(dim_), q, k, v, att, proj;
  for (int64_t l = 0; l < layers_n_; ++l) {
    const Layer& L = layers_[l];
    Norm(L.attn_norm, x.data(), xn.data(), dim_);
    if (L.wqkv != nullptr) {
      std::vector<double> qkv;
      MatVec(L.wqkv, xn, q_dim + 2 * kv_dim, qkv);
      q.assign(qkv.begin(), qkv.begin() + q_dim);
      k.assign(qkv.begin() + q_dim, qkv.begin() + q_dim + kv_dim);
      v.assign(qkv.begin() + q_dim + kv_dim, qkv.end());
    } else {
      MatVec(L.wq, xn, q_dim, q, L.bq);
      MatVec(L.wk, xn, kv_dim, k, L.bk);
      MatVec(L.wv, xn, kv_dim, v, L.bv);
    }
    if (L.q_norm != nullptr) {
      for (int64_t h = 0; h < heads_; ++h)
        Norm(L.q_norm, &q[h * head_dim_], &q[h * head_dim_], head_dim_);
      for (int64_t h = 0; h < kv_heads_; ++h)
        Norm(L.k_norm, &k[h * head_dim_], &k[h * head_dim_], head_dim_);
    }
    RotateHeads(L, q, heads_, pos_);
    RotateHeads(L, k, kv_heads_, pos_);
    k_cache_[l].insert(k_cache_[l].end(), k.begin(), k.end());
    v_cache_[l].insert(v_cache_[l].end(), v.begin(), v.end());
    Attention(l, q, att);
    MatVec(L.wo, att, dim_, proj, L.bo);
    if (L.attn_post_norm != nullptr) NormVector(L.attn_post_norm, proj);
    for (int64_t i = 0; i < dim_; ++i) x[i] += proj[i];
    Norm(L.ffn_norm, x.data(), xn.data(), dim_);
    Ffn(L, xn, proj);
    for (int64_t i = 0; i < dim_; ++i) x[i] += proj[i];
  }
  Norm(out_norm_, x.data(), xn.data(), dim_);
  std::vector<double> logits;
  MatVec(output_, xn, vocab_, logits);
  if (final_softcap_ > 0) {
    for (double& z : logits) z = final_softcap_ * std::tanh(z / final_softcap_);
  }
  ++pos_;
  return logits;
}

}  // namespace kvserve::model_test
