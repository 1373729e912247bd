// Mixture-of-experts FFN block (DeepSeek-V2/V3, Qwen2-MoE, Qwen3-MoE; llama.cpp's
// build_moe_ffn), written once for every MoE architecture.
//
//   n       = RMSNorm(x) * ffn_norm                                        (T, dim)
//   logits  = Wrouter n (+ router bias)                                    (T, E)
//   probs   = softmax(logits) | sigmoid(logits) | logits (softmax_weight)  (T, E)
//   chosen  = top_k of probs (+ selection bias), ties by the lower expert index
//   w_k     = probs[chosen_k]; / sum_k w_k when norm_topk; * weights_scale when set;
//             softmax_weight (gpt-oss): w = softmax over the k chosen logits
//   y       = sum_k w_k * (Wdown_e act(Wgate_e n + bg_e, Wup_e n + bu_e) + bd_e)
//             e = chosen_k, k = 0, 1, ...; act = silu(g) * u or the clamped SwiGLU; the
//             expert biases b*_e only where MoeConfig::biases (gpt-oss)
//   y      += shared experts' FFN(n) (* sigmoid(Wshared_gate n) when it has a gate)
//   x      += y
//
// Grouped by expert: the step's rows are sorted by expert (a stable counting sort: within an
// expert, rows in token order), each active expert runs its three matmuls once over all of its
// rows, so a 16-sequence decode step reads each active expert's weights once, not once per
// token. Determinism (DESIGN.md section 5): the matmul gives each row the same value whatever
// the other rows (kernels/cpu/matmul.h), routing is per token, and a token's y is summed over
// k = 0..top_k-1 in that fixed order, so its output is bit-identical alone, batched or with any
// thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"
#include "model/layers.h"
#include "model/moe_config.h"

namespace kvserve::model {

// The weights of one MoE layer, pointing into the mapped file.
struct MoeWeights {
  const float* norm = nullptr;                           // (dim)
  kernels::WeightMatrix router;                          // (E, dim): ffn_gate_inp
  const float* selection_bias = nullptr;                 // (E) or null
  const float* router_bias = nullptr;                    // (E) or null (gpt-oss)
  const float* gate_bias = nullptr;                      // (E, ffn) or null (gpt-oss)
  const float* up_bias = nullptr;                        // (E, ffn) or null
  const float* down_bias = nullptr;                      // (E, dim) or null
  std::vector<kernels::WeightMatrix> gate, up, down;     // (E): (ffn, dim) x2, (dim, ffn)
  kernels::WeightMatrix shared_gate_up[2], shared_down;  // gate, up (sffn, dim); (dim, sffn)
  kernels::WeightMatrix shared_gate;                     // (1, dim): ffn_gate_inp_shexp
};

// The slices of the 3-D tensor `name` (GGUF dims {cols, rows, experts}) as one matrix each.
// note: the config reader checked the tensor (CHECKed here).
std::vector<kernels::WeightMatrix> BindExperts(const gguf::GgufFile& file, const std::string& name);
// Binds layer `layer`'s MoE tensors by llama.cpp's names (ffn_gate_inp, ffn_{gate,up,down}_exps,
// exp_probs_b.bias, ffn_{gate,up,down}_shexp, ffn_gate_inp_shexp, and with biases
// ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias).
MoeWeights BindMoe(const gguf::GgufFile& file, const MoeConfig& config, int layer);

// Checks layer `layer`'s MoE tensors exist with the shapes of `config` and a dtype the matmul
// takes (the router must be F32, F16 or BF16). InvalidArgument naming the tensor otherwise.
Status CheckMoeTensors(const gguf::GgufFile& file, const MoeConfig& config, int64_t dim, int layer);

// Scratch of MoeFfnBlock, T = max_batch_tokens.
struct MoeBuffers {
  MoeBuffers(int64_t max_tokens, int64_t dim, const MoeConfig& config);
  std::vector<float> logits;       // (T, E)
  std::vector<int32_t> chosen;     // (T, top_k)
  std::vector<float> weights;      // (T, top_k)
  std::vector<int32_t> offsets;    // (E + 1): first sorted row of each expert
  std::vector<int32_t> order;      // (T * top_k): sorted row -> t * top_k + k
  std::vector<int32_t> slot;       // (T * top_k): t * top_k + k -> sorted row
  std::vector<int32_t> cursor;     // (E): counting-sort cursors
  std::vector<int32_t> claim;      // (E): active experts in the order the threads claim them
  std::vector<float> in;           // (T * top_k, dim): gathered inputs, by expert
  std::vector<float> gate, up;     // (T * top_k, ffn): by expert, as `in`
  std::vector<float> out;          // (T * top_k, dim): expert outputs, by expert
  std::vector<float> shared_gate;  // (T)
  std::vector<float> shared_g, shared_u;  // (T, shared ffn): the shared experts' gate and up
  std::vector<float> shared_out;          // (T, dim): the shared experts' output
  // The step's rows (xb) quantized once for the experts' gate and up when those take quantized
  // rows (x_block = kernels::MatMulActivationBlock > 0; 0: each expert quantizes its own gathered
  // float rows): (T, dim) codes, block scales and code sums; an expert's rows gathered from them
  // (T rows: a token picks an expert at most once) when experts run one after another.
  struct QuantRows {
    QuantRows(int64_t rows, int64_t dim) : q(rows * dim), d(rows * (dim / 32)), sums(rows * (dim / 16)) {}
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int16_t> sums;
  };
  QuantRows xq, gathered;
  int64_t x_block = 0;
  // Whole-expert lanes of a few-token step (MoeFfnBlock): one serial pool, one matmul scratch
  // (kWholeExpertMaxTokens rows, lane_cols = max(dim, expert ffn, shared ffn) columns) and the
  // expert's gathered quantized rows per range index of the caller's pool, made by the first
  // such step with that many threads.
  struct Lane {
    Lane(int64_t tokens, int64_t cols, int64_t dim) : scratch(tokens, cols), gathered(tokens, dim) {}
    ThreadPool serial{1};
    kernels::MatMulScratch scratch;
    QuantRows gathered;
  };
  std::vector<std::unique_ptr<Lane>> lanes;
  int64_t dim = 0, lane_cols = 0;
};

// Steps of at most this many tokens run each active expert on one thread (whole experts
// claimed by the pool's threads) when there are at least kWholeExpertsPerThread active experts
// per thread; larger steps split each expert's rows over the threads.
inline constexpr int64_t kWholeExpertMaxTokens = 64;
inline constexpr int64_t kWholeExpertsPerThread = 2;

// Picks token t's experts: chosen[k] and weights[k] for k < top_k from logits (E values),
// as in the header comment. Exposed for tests.
void RouteToken(const MoeConfig& config, const float* selection_bias, const float* logits,
                int32_t* chosen, float* weights);

// x += MoE(RMSNorm(x) * norm) for the first n rows of act.x (act.xb and act.proj are used as
// scratch).
void MoeFfnBlock(const MoeWeights& w, const MoeConfig& config, float eps, int64_t n,
                 Activations& act, MoeBuffers& buf, kernels::MatMulScratch& scratch,
                 ThreadPool& pool);

}  // namespace kvserve::model
