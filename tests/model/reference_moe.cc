#include "reference_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvserve::model_test {
namespace {

std::vector<double> MatVec(const float* w, const std::vector<double>& in, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(in.size());
  std::vector<double> out(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r] += static_cast<double>(w[r * cols + c]) * in[c];
  }
  return out;
}

}  // namespace

std::vector<double> ReferenceSwiglu(const float* gate, const float* up, const float* down,
                                    int64_t ffn, int64_t dim, const std::vector<double>& n) {
  std::vector<double> g = MatVec(gate, n, ffn), u = MatVec(up, n, ffn);
  for (int64_t i = 0; i < ffn; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return MatVec(down, g, dim);
}

// gpt-oss's expert: down (act(gate n + bg, up n + bu)) + bd with the clamped SwiGLU.
std::vector<double> ReferenceOaiExpert(const ReferenceMoeLayer& L, int64_t e,
                                       const std::vector<double>& n) {
  const int64_t f = L.expert_ffn;
  std::vector<double> g = MatVec(L.gate_exps + e * f * L.dim, n, f);
  std::vector<double> u = MatVec(L.up_exps + e * f * L.dim, n, f);
  for (int64_t i = 0; i < f; ++i) {
    const double gi = std::min(g[i] + L.gate_bias[e * f + i], 7.0);
    const double ui = std::clamp(u[i] + L.up_bias[e * f + i], -7.0, 7.0);
    g[i] = gi / (1 + std::exp(-1.702 * gi)) * (ui + 1);
  }
  std::vector<double> out = MatVec(L.down_exps + e * f * L.dim, g, L.dim);
  for (int64_t d = 0; d < L.dim; ++d) out[d] += L.down_bias[e * L.dim + d];
  return out;
}

std::vector<double> ReferenceMoe(const ReferenceMoeLayer& L, const std::vector<double>& n) {
  std::vector<double> logits = MatVec(L.router, n, L.experts);
  if (L.router_bias != nullptr) {
    for (int64_t e = 0; e < L.experts; ++e) logits[e] += L.router_bias[e];
  }
  std::vector<double> probs(L.experts);
  if (L.softmax_weight) {
    probs = logits;
  } else if (L.sigmoid) {
    for (int64_t e = 0; e < L.experts; ++e) probs[e] = 1 / (1 + std::exp(-logits[e]));
  } else {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int64_t e = 0; e < L.experts; ++e) sum += (probs[e] = std::exp(logits[e] - mx));
    for (double& p : probs) p /= sum;
  }
  std::vector<double> select = probs;
  if (L.selection_bias != nullptr) {
    for (int64_t e = 0; e < L.experts; ++e) select[e] += L.selection_bias[e];
  }
  std::vector<int64_t> order(L.experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return select[a] > select[b]; });
  double wsum = 0;
  for (int64_t k = 0; k < L.top_k; ++k) wsum += probs[order[k]];
  if (L.softmax_weight) {  // the chosen logits' softmax (probs[order[0]] is their maximum)
    const double top = probs[order[0]];
    wsum = 0;
    for (int64_t k = 0; k < L.top_k; ++k) wsum += std::exp(probs[order[k]] - top);
    for (int64_t k = 0; k < L.top_k; ++k) probs[order[k]] = std::exp(probs[order[k]] - top) / wsum;
  }
  std::vector<double> y(L.dim, 0.0);
  const int64_t f = L.expert_ffn;
  for (int64_t k = 0; k < L.top_k; ++k) {  // each chosen expert on its own
    const int64_t e = order[k];
    double w = probs[e];
    if (L.norm_topk) w /= wsum;
    if (L.weights_scale != 0) w *= L.weights_scale;
    const std::vector<double> out =
        L.swiglu_oai ? ReferenceOaiExpert(L, e, n)
                     : ReferenceSwiglu(L.gate_exps + e * f * L.dim, L.up_exps + e * f * L.dim,
                                       L.down_exps + e * f * L.dim, f, L.dim, n);
    for (int64_t d = 0; d < L.dim; ++d) y[d] += w * out[d];
  }
  if (L.shared_ffn > 0) {
    const std::vector<double> s =
        ReferenceSwiglu(L.gate_shexp, L.up_shexp, L.down_shexp, L.shared_ffn, L.dim, n);
    double g = 1;
    if (L.shared_gate != nullptr) {
      double dot = 0;
      for (int64_t d = 0; d < L.dim; ++d) dot += L.shared_gate[d] * n[d];
      g = 1 / (1 + std::exp(-dot));
    }
    for (int64_t d = 0; d < L.dim; ++d) y[d] += g * s[d];
  }
  return y;
}

}  // namespace kvserve::model_test
