// V41Model: the `kvserve-v41` architecture (DeepSeek-V4.1-style hybrid attention, dense SwiGLU
// FFN) on CPU over a ragged batch, its KV in the hybrid KV manager's groups (model/v41_config.h).
//
//   x = token_embd[token]
//   per layer l:  n = RMSNorm(x) * attn_norm
//     q   = Wq · n            (heads, D), rope on the last rope_dim values of each head
//     row = Wkv · n           (D), rope on its last rope_dim values; stored in the window (FP8)
//     source layers, for every entry i completed by this step (its last token p = r*i + r - 1
//     is in the step):  c = Wc · concat(window rows r*i .. r*i + r - 1, as stored)   (D)
//                       k_idx = Wik · c (index_dim); c roped at position r*i on its last
//                       rope_dim values; c and k_idx stored (FP4) in entry i
//     readers of a source (and the source): q_idx = Wiq · n (index_heads, index_dim),
//                       w_idx = Wiw · n (index_heads)
//     x += Wo · HybridAttention(q, window, selected entries)   (kernels/cpu/latent_attention.h)
//     x += Wdown · (silu(Wgate · n') * (Wup · n')),  n' = RMSNorm(x) * ffn_norm
//   logits = Woutput · (RMSNorm(x) * output_norm)
//
// Chunk independence: an entry is written exactly once, when its last token is computed, from
// window rows that are stored before (ratio <= window, so they are still cached); a block
// boundary never splits an entry (block_size % ratio == 0), so a cached block holds complete
// entries and a prefix hit restores them exactly.
// Owns: the mapped GGUF file and scratch activations sized at Load; Forward allocates nothing
// (except the indexer's candidate stage, past candidate_blocks * candidate_block_size entries).
// Thread safety: Forward runs on one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/latent_attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/v41_config.h"
#include "tensor/kv_view.h"

namespace kvserve::model {

class V41Model final : public Model {
 public:
  static Result<std::unique_ptr<V41Model>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                const LoadOptions& options);

  const V41Config& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  std::string_view architecture() const override { return config_.architecture; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  // Model::Forward. kv must come from a KvCacheManager built on MakeV41KvLayout's kv_config:
  // kv.paged[0] is the window, kv.latent[g] latent group g.
  void Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) override;

 private:
  struct LayerWeights {
    const float* attn_norm = nullptr;       // (dim)
    kernels::WeightMatrix wq, wkv, wo;      // (heads*D, dim), (D, dim), (dim, heads*D)
    kernels::WeightMatrix compress, idx_k;  // sources: (D, r*D), (index_dim, D)
    kernels::WeightMatrix idx_q, idx_w;     // readers: (ih*idim, dim), (ih, dim)
    FfnWeights ffn;
  };

  V41Model(std::shared_ptr<const gguf::GgufFile> file, V41Config config, LoadOptions options);
  void BindWeights();
  void BuildSequences(const Batch& batch);
  void AttentionBlock(int layer, const KvViews& kv, ThreadPool& pool);
  void WriteEntries(int layer, const KvViews& kv, ThreadPool& pool);

  std::shared_ptr<const gguf::GgufFile> file_;
  V41Config config_;
  LoadOptions options_;
  V41KvLayout layout_;        // for slot lookups (block size independent parts only)
  kernels::RopeParams rope_;  // head_dim D, rope_dim R: applied at offset D - R

  kernels::WeightMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;

  // Per step.
  TokenRows rows_;
  std::vector<std::vector<kernels::HybridSequence>> seqs_;  // [latent group] (0: window only)

  // Scratch, T = max_batch_tokens, D = latent_dim, H = heads.
  Activations act_;                 // x, xb, proj, gate, up, last
  std::vector<float> q_, att_;      // (T, H * D)
  std::vector<float> row_;          // (T, D)
  std::vector<float> q_idx_;        // (T, index_heads * index_dim)
  std::vector<float> w_idx_;        // (T, index_heads)
  std::vector<float> cin_;          // (T, max_ratio * D): compression inputs
  std::vector<float> centry_;       // (T, D)
  std::vector<float> kidx_;         // (T, index_dim)
  std::vector<int32_t> entry_pos_;  // (T): first token of each entry being written
  std::vector<int64_t> entry_seq_;  // (T)
  std::unique_ptr<kernels::HybridAttentionScratch> attention_scratch_;
  std::unique_ptr<kernels::MatMulScratch> matmul_scratch_;
};

}  // namespace kvserve::model
