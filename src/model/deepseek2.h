// Deepseek2Model: the GGUF `deepseek2` architecture (DeepSeek-V2, V2-Lite, V3 shapes) on CPU:
// multi-head latent attention whose KV cache holds only one latent row per token per layer
// (model/deepseek2_config.h), decoded with the up-projections absorbed, then a dense FFN
// (leading layers) or a mixture of experts (model/moe.h).
//
//   x = token_embd[token]                                                      (T, dim)
//   per layer l:  n = RMSNorm(x) * attn_norm
//     q      = Wq n, or Wq_b (RMSNorm(Wq_a n) * q_a_norm) with q LoRA    (T, H, nope + rope)
//     [c|kr] = Wkv_a n                                               (T, kv_lora + rope)
//     c      = RMSNorm(c) * kv_a_norm;  kr = YaRN-rope(kr);  q_pe = YaRN-rope(q[:, :, nope:])
//     cache  <- [c | kr]  (one latent row, stored in the latent group's dtype, read back as stored)
//     q_abs[h] = W_kb[h] q_nope[h]       (kv_lora)  the key up-projection absorbed into q
//     o[h]     = MlaAttention([q_abs[h] | q_pe[h]], cached rows)[0 : kv_lora]  (mla_attention.h)
//     x += Wo concat_h(W_vb[h] o[h])     the value up-projection applied after attention
//     x += dense FFN (l < leading_dense) or MoE FFN
//   logits = Woutput (RMSNorm(x) * output_norm)
//
// Owns: the mapped file and scratch sized at Load for max_batch_tokens; Forward allocates
// nothing. Determinism: every block is per row in a fixed order (model/layers.h, moe.h,
// mla_attention.h). Thread safety: Forward runs on one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/mla_attention.h"
#include "model/deepseek2_config.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/moe.h"

namespace kvserve::model {

class Deepseek2Model final : public Model {
 public:
  // Reads the config and binds the weights in place; InvalidArgument for a shape-only file.
  static Result<std::unique_ptr<Deepseek2Model>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                      const LoadOptions& options);

  const Deepseek2Config& config() const { return config_; }
  std::string_view architecture() const override { return config_.architecture; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  // Model::Forward; kv.latent[0] holds num_layers layers of latent_dim values.
  void Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) override;

 private:
  struct AttentionWeights {
    const float* norm = nullptr;             // (dim)
    kernels::WeightMatrix q, q_a, q_b;       // q or (q_a, q_b)
    const float* q_a_norm = nullptr;         // (q_lora)
    kernels::WeightMatrix kv_a;              // (kv_lora + rope, dim)
    const float* kv_a_norm = nullptr;        // (kv_lora)
    std::vector<kernels::WeightMatrix> k_b;  // (H): (kv_lora, nope)
    std::vector<kernels::WeightMatrix> v_b;  // (H): (v_dim, kv_lora)
    kernels::WeightMatrix o;                 // (dim, H * v_dim)
  };

  Deepseek2Model(std::shared_ptr<const gguf::GgufFile> file, Deepseek2Config config,
                 LoadOptions options);
  // A thread's copies of one head's rows and its own serial pool and matmul scratch, for the
  // per-head products of a step of at most kWholeHeadMaxTokens tokens (PerHead).
  struct HeadLane {
    HeadLane(int64_t tokens, int64_t cols);
    ThreadPool serial{1};
    kernels::MatMulScratch scratch;
    std::vector<float> in, out;  // (tokens, cols)
  };
  static constexpr int64_t kWholeHeadMaxTokens = 64;

  void Attention(int layer, const tensor::PagedLatentView& kv, ThreadPool& pool);
  // out[t, h] = w[h] in[t, h] for every head: in row t of head h at in + t * in_row + h *
  // in_head (w[h].cols values), out at out + t * out_row + h * out_head (w[h].rows values).
  // With several threads and at most kWholeHeadMaxTokens rows, each thread takes whole heads
  // (no barrier per head); otherwise each head's rows are split over the pool. The bits are
  // the matmul's either way.
  void PerHead(const std::vector<kernels::WeightMatrix>& w, int64_t n, const float* in,
               int64_t in_row, int64_t in_head, float* out, int64_t out_row, int64_t out_head,
               ThreadPool& pool);

  std::shared_ptr<const gguf::GgufFile> file_;
  Deepseek2Config config_;
  LoadOptions options_;
  kernels::RopeParams rope_;  // head_dim = the stride between rope slices, rope_dim
  kernels::MlaShape mla_;

  kernels::WeightMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<AttentionWeights> attention_;  // (layers)
  std::vector<FfnWeights> dense_;            // (leading_dense)
  std::vector<MoeWeights> moe_;              // (layers - leading_dense)

  // Per step.
  TokenRows rows_;
  std::vector<kernels::AttentionSequence> seqs_;

  // Scratch, T = max_batch_tokens, H = heads.
  Activations act_;
  std::vector<float> q_;                   // (T, H, nope + rope)
  std::vector<float> q_a_;                 // (T, q_lora)
  std::vector<float> latent_;              // (T, kv_lora + rope)
  std::vector<float> q_abs_;               // (T, H, kv_lora + rope)
  std::vector<float> o_;                   // (T, H, latent): MlaAttention output, kv_lora used
  std::vector<float> att_;                 // (T, H, v_dim)
  std::vector<float> head_in_, head_out_;  // (T, max(nope, kv_lora)), (T, max(kv_lora, v_dim))
  std::vector<float> rope_cs_;             // (T, rope): the step's YaRN cos/sin pairs
  std::vector<std::unique_ptr<HeadLane>> head_lanes_;  // (max_threads)
  std::unique_ptr<MoeBuffers> moe_buffers_;
  std::unique_ptr<kernels::MlaScratch> mla_scratch_;
  std::unique_ptr<kernels::MatMulScratch> matmul_scratch_;
};

}  // namespace kvserve::model
