// LlamaModel: the GGUF `llama` architecture on CPU over a ragged batch, K/V in one full-attention
// KV group read through block tables.
//
//   x = token_embd[token]                                                     (T, dim)
//   per layer: x += Wo · Attention(RoPE(Wq · n), RoPE(Wk · n), Wv · n),  n = RMSNorm(x) * attn_norm
//              x += Wdown · (silu(Wgate · n) * (Wup · n)),             n = RMSNorm(x) * ffn_norm
//   logits = Woutput · (RMSNorm(x) * output_norm)   (Woutput = token_embd when tied)
//
// Owns: the mapped GGUF file (weights are used in place from it, never copied) and every scratch
// activation, preallocated at Load for max_batch_tokens; Forward allocates nothing.
// Determinism: every block (model/layers.h) is per token or per (token, head) in a fixed order,
// so a sequence's logits are bit-identical alone or batched, however its prompt is chunked, for
// any thread count.
// Thread safety: Forward may run on one thread at a time (it uses the scratch buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/model.h"

namespace kvserve::model {

class LlamaModel final : public Model {
 public:
  // Reads the config (a clear Status when metadata is missing or inconsistent) and binds the
  // weights in place.
  static Result<std::unique_ptr<LlamaModel>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                  const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  std::string_view architecture() const override { return config_.architecture; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  // Model::Forward; kv.paged[0] holds num_layers layers of num_kv_heads * head_dim values.
  void Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) override;

 private:
  LlamaModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config, LoadOptions options);

  std::shared_ptr<const gguf::GgufFile> file_;
  ModelConfig config_;
  LoadOptions options_;
  kernels::AttentionShape attention_shape_;
  kernels::RopeParams rope_;

  // Weights, pointing into file_'s mapping.
  kernels::WeightMatrix token_embd_;         // (vocab, dim)
  kernels::WeightMatrix output_;             // (vocab, dim): token_embd_ when tied
  const float* output_norm_ = nullptr;       // (dim)
  std::vector<AttentionWeights> attention_;  // (layers)
  std::vector<FfnWeights> ffn_;              // (layers)

  // Per step: the batch's rows and each sequence's attention slice (capacity reserved at Load).
  TokenRows rows_;
  std::vector<kernels::AttentionSequence> seqs_;

  // Scratch, T = max_batch_tokens.
  Activations act_;
  AttentionBuffers attention_buffers_;
  std::unique_ptr<kernels::AttentionScratch> attention_scratch_;
  kernels::MatMulScratch matmul_scratch_;  // T tokens, max(dim, ffn) columns
};

}  // namespace kvserve::model
