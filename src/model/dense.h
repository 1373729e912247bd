// DenseModel: every GGUF transformer with dense attention kvserve runs (llama, qwen2, qwen3,
// phi3, gemma2, gemma3, and the mixtures of experts qwen2moe, qwen3moe; model/config.h says how
// they differ) on CPU over a ragged batch. K/V live in one
// KV group per distinct attention window (model::DenseKvGroups): one full group for most
// models, a full and a sliding-window group for Gemma, read through block tables.
//
//   x = token_embd[token] * embedding_scale                                    (T, dim)
//   per layer l: x += AttentionBlock(x)  over the group of l's window (model/layers.h)
//                x += GatedFfnBlock(x), or MoeFfnBlock(x) (model/moe.h) for a mixture of experts
//   logits = softcap(Woutput · (RMSNorm(x) * output_norm))   (Woutput = token_embd when tied)
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
#include "model/moe.h"

namespace kvserve::model {

class DenseModel final : public Model {
 public:
  // Reads the config (a clear Status when metadata is missing or inconsistent) and binds the
  // weights in place.
  static Result<std::unique_ptr<DenseModel>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                  const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  std::string_view architecture() const override { return config_.architecture; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  // Model::Forward; kv.paged[g] holds group g of DenseKvGroups (num_kv_heads * head_dim values
  // per row), layers indexed by model layer.
  void Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) override;

 private:
  DenseModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config, LoadOptions options);
  void BindLayers();

  std::shared_ptr<const gguf::GgufFile> file_;
  ModelConfig config_;
  LoadOptions options_;

  // Per layer: its attention shape (window, soft-cap), rotary embedding and KV group.
  std::vector<kernels::AttentionShape> shapes_;  // (layers)
  std::vector<kernels::RopeParams> ropes_;       // (layers)
  std::vector<int> group_of_layer_;              // (layers)
  int num_groups_ = 1;
  // Rotary angles per step, computed once for every layer that shares them: table
  // rope_table_of_layer_[l] of rope_tables_ (each (T, rope_dim): RopeAnglesRows).
  std::vector<int> rope_table_of_layer_;        // (layers)
  std::vector<std::vector<float>> rope_tables_;  // (distinct angle sets)

  // Weights, pointing into file_'s mapping.
  kernels::WeightMatrix token_embd_;         // (vocab, dim)
  kernels::WeightMatrix output_;             // (vocab, dim): token_embd_ when tied
  const float* output_norm_ = nullptr;       // (dim)
  std::vector<AttentionWeights> attention_;  // (layers)
  std::vector<FfnWeights> ffn_;              // (layers), or empty for a mixture of experts
  std::vector<MoeWeights> moe_;              // (layers) for a mixture of experts, else empty

  // Per step: the batch's rows and each group's attention slices (capacity reserved at Load).
  TokenRows rows_;
  std::vector<std::vector<kernels::AttentionSequence>> seqs_;  // (groups)

  // Scratch, T = max_batch_tokens.
  Activations act_;
  AttentionBuffers attention_buffers_;
  std::unique_ptr<MoeBuffers> moe_buffers_;  // mixtures of experts only
  std::unique_ptr<kernels::AttentionScratch> attention_scratch_;
  kernels::MatMulScratch matmul_scratch_;  // T tokens, max(dim, q_row, ffn, expert ffns) columns
};

}  // namespace kvserve::model
