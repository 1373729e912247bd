// MoeFfnBlock (model/moe.h) against the same layer evaluated token by token and expert by
// expert with the same kernels: every token's row of x, after the block over a batch of n
// tokens with 1-3 threads (the whole-expert lanes and the split-rows path), equals bit for bit
// the token alone through its top-k experts one at a time, summed k = 0, 1, ... in order, then
// the shared experts. A change of the order of that sum, of which rows an expert sees, or of
// the thread split shows here as a different bit.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/layers.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

using tensor::DType;

constexpr int64_t kDim = 256;

// One MoE layer's weights in memory (random, quantized to the layer's types) and its MoeWeights.
class RandomMoeLayer {
 public:
  RandomMoeLayer(const MoeConfig& c, DType gate_up_type, DType down_type, uint32_t seed)
      : rng_(seed) {
    const int64_t e = c.num_experts, f = c.expert_ffn_dim, s = c.shared_ffn_dim;
    w_.norm = Floats(kDim, 0.8f, 1.2f);
    w_.router = Matrix(DType::kF32, e, kDim, 1);
    w_.gate = Experts(gate_up_type, e, f, kDim);
    w_.up = Experts(gate_up_type, e, f, kDim);
    w_.down = Experts(down_type, e, kDim, f);
    if (c.biases) {
      w_.router_bias = Floats(e, -0.5f, 0.5f);
      w_.gate_bias = Floats(e * f, -0.5f, 0.5f);
      w_.up_bias = Floats(e * f, -0.5f, 0.5f);
      w_.down_bias = Floats(e * kDim, -0.5f, 0.5f);
    }
    if (s > 0) {
      w_.shared_gate_up[0] = Matrix(gate_up_type, s, kDim, 1);
      w_.shared_gate_up[1] = Matrix(gate_up_type, s, kDim, 1);
      w_.shared_down = Matrix(down_type, kDim, s, 1);
      if (c.shared_gate) w_.shared_gate = Matrix(DType::kF32, 1, kDim, 1);
    }
  }
  const MoeWeights& weights() const { return w_; }

 private:
  const float* Floats(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float>& v = floats_.emplace_back(static_cast<size_t>(n));
    for (float& x : v) x = u(rng_);
    return v.data();
  }
  // `count` matrices (rows, cols) of `dtype` back to back; the first one's matrix.
  kernels::WeightMatrix Matrix(DType dtype, int64_t rows, int64_t cols, int64_t count) {
    const int64_t row_bytes = tensor::RowBytes(dtype, cols);
    std::vector<uint8_t>& bytes =
        bytes_.emplace_back(static_cast<size_t>(count * rows * row_bytes));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < count * rows; ++r) {
      for (float& x : row) x = normal(rng_) * 0.1f;
      tensor::QuantizeRow(dtype, row.data(), bytes.data() + r * row_bytes, cols);
    }
    return {bytes.data(), dtype, rows, cols};
  }
  std::vector<kernels::WeightMatrix> Experts(DType dtype, int64_t e, int64_t rows, int64_t cols) {
    const kernels::WeightMatrix first = Matrix(dtype, rows, cols, e);
    std::vector<kernels::WeightMatrix> out;
    for (int64_t i = 0; i < e; ++i) {
      out.push_back({static_cast<const uint8_t*>(first.data) +
                         i * rows * tensor::RowBytes(dtype, cols),
                     dtype, rows, cols});
    }
    return out;
  }

  std::mt19937 rng_;
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<uint8_t>> bytes_;
  MoeWeights w_;
};

// x += MoE(x) for one token (x: kDim values), written out step by step: the router, each chosen
// expert alone through kernels::MatMul with one token, y = sum_k w_k (down_k + bias) in k order,
// the shared experts, the residual.
void OneTokenReference(const MoeWeights& w, const MoeConfig& c, float eps, float* x) {
  ThreadPool pool(1);
  const int64_t f = c.expert_ffn_dim, s = c.shared_ffn_dim;
  kernels::MatMulScratch scratch(1, std::max({kDim, f, s}));
  std::vector<float> n(kDim), logits(static_cast<size_t>(c.num_experts)), y(kDim, 0.0f),
      o(kDim);
  NormRows(w.norm, x, n.data(), 1, kDim, eps, pool);
  kernels::MatMul(w.router, n.data(), 1, logits.data(), pool, scratch);
  if (w.router_bias != nullptr) kernels::AddInPlace(logits.data(), w.router_bias, c.num_experts);
  std::vector<int32_t> chosen(static_cast<size_t>(c.top_k));
  std::vector<float> weights(static_cast<size_t>(c.top_k));
  RouteToken(c, w.selection_bias, logits.data(), chosen.data(), weights.data());
  // gate / up / down of one FFN (the expert's biases where it has them) into o.
  auto ffn = [&](const kernels::WeightMatrix& gate, const kernels::WeightMatrix& up,
                 const kernels::WeightMatrix& down, const float* gate_bias, const float* up_bias) {
    std::vector<float> g(static_cast<size_t>(gate.rows)), u(static_cast<size_t>(gate.rows));
    kernels::MatMul(gate, n.data(), 1, g.data(), pool, scratch);
    kernels::MatMul(up, n.data(), 1, u.data(), pool, scratch);
    if (c.activation == ExpertActivation::kSwigluOai) {
      kernels::SwigluOaiMul(g.data(), u.data(), gate.rows, gate_bias, up_bias);
    } else {
      kernels::SiluMul(g.data(), u.data(), gate.rows);
    }
    kernels::MatMul(down, g.data(), 1, o.data(), pool, scratch);
  };
  for (int64_t k = 0; k < c.top_k; ++k) {
    const int32_t e = chosen[static_cast<size_t>(k)];
    ASSERT_FALSE(c.biases && c.shared_ffn_dim > 0);  // one or the other in these layers
    ffn(w.gate[e], w.up[e], w.down[e], c.biases ? w.gate_bias + e * f : nullptr,
        c.biases ? w.up_bias + e * f : nullptr);
    kernels::AddScaledRow(y.data(), o.data(), c.biases ? w.down_bias + e * kDim : nullptr,
                          weights[static_cast<size_t>(k)], kDim, /*accumulate=*/k > 0);
  }
  if (s > 0) {
    ffn(w.shared_gate_up[0], w.shared_gate_up[1], w.shared_down, nullptr, nullptr);
    if (c.shared_gate) {
      float logit = 0.0f;
      kernels::MatMul(w.shared_gate, n.data(), 1, &logit, pool, scratch);
      kernels::AddScaledRow(y.data(), o.data(), nullptr, 1.0f / (1.0f + std::exp(-logit)), kDim,
                            true);
    } else {
      kernels::AddInPlace(y.data(), o.data(), kDim);
    }
  }
  kernels::AddInPlace(x, y.data(), kDim);
}

struct LayerCase {
  std::string name;
  MoeConfig config;
  DType gate_up, down;
};

std::vector<LayerCase> Cases() {
  MoeConfig qwen2;  // softmax, a gated shared expert: Q4_K_M's Q4_K / Q6_K
  qwen2.num_experts = 8;
  qwen2.top_k = 3;
  qwen2.expert_ffn_dim = 256;
  qwen2.shared_ffn_dim = 512;
  qwen2.shared_gate = true;
  MoeConfig deepseek = qwen2;  // sigmoid, normalised and scaled weights, an ungated shared one
  deepseek.gating = ExpertGating::kSigmoid;
  deepseek.norm_topk = true;
  deepseek.weights_scale = 2.5f;
  deepseek.shared_gate = false;
  deepseek.shared_ffn_dim = 256;
  MoeConfig gptoss;  // softmax over the chosen logits, biases, the clamped SwiGLU: MXFP4
  gptoss.num_experts = 8;
  gptoss.top_k = 4;
  gptoss.expert_ffn_dim = 256;
  gptoss.gating = ExpertGating::kSoftmaxWeight;
  gptoss.biases = true;
  gptoss.activation = ExpertActivation::kSwigluOai;
  return {{"qwen2moe-like", qwen2, DType::kQ4_K, DType::kQ6_K},
          {"deepseek2-like", deepseek, DType::kQ4_K, DType::kQ4_K},
          {"gpt-oss-like", gptoss, DType::kMXFP4, DType::kMXFP4}};
}

// n = 1 (one token), 16 (a 16-sequence decode step: whole experts per thread) and 70 (past
// kWholeExpertMaxTokens: each expert's rows split over the threads), 1-3 threads.
TEST(MoeFfnBlockTest, BatchedEqualsEachTokenThroughItsExpertsInOrder) {
  constexpr float kEps = 1e-6f;
  uint32_t seed = 4100;
  for (const LayerCase& lc : Cases()) {
    const MoeConfig& c = lc.config;
    const RandomMoeLayer layer(c, lc.gate_up, lc.down, ++seed);
    for (int64_t n : {1, 16, 70}) {
      std::mt19937 rng(++seed);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x0(static_cast<size_t>(n * kDim));
      for (float& v : x0) v = normal(rng);
      std::vector<float> want = x0;
      for (int64_t t = 0; t < n; ++t) OneTokenReference(layer.weights(), c, kEps, &want[t * kDim]);
      const int64_t cols = std::max({kDim, c.expert_ffn_dim, c.shared_ffn_dim});
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(lc.name + " n=" + std::to_string(n) + " threads=" + std::to_string(threads));
        ThreadPool pool(threads);
        Activations act(n, kDim, c.expert_ffn_dim);
        MoeBuffers buf(n, kDim, c);
        kernels::MatMulScratch scratch(n, cols);
        std::copy(x0.begin(), x0.end(), act.x.begin());
        MoeFfnBlock(layer.weights(), c, kEps, n, act, buf, scratch, pool);
        for (int64_t i = 0; i < n * kDim; ++i) {
          uint32_t a, b;
          std::memcpy(&a, &act.x[i], 4);
          std::memcpy(&b, &want[i], 4);
          ASSERT_EQ(a, b) << "token " << i / kDim << " value " << i % kDim << ": " << act.x[i]
                          << " vs " << want[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::model
