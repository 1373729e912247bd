#include "model/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kvserve::model {

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(std::shared_ptr<const gguf::GgufFile> file,
                                                     const LoadOptions& options) {
  CHECK(file != nullptr);
  KV_ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(*file));
  KV_ASSIGN_OR_RETURN(LoadOptions resolved, ResolveLoadOptions(options, config.context_length));
  return std::unique_ptr<LlamaModel>(new LlamaModel(std::move(file), config, resolved));
}

LlamaModel::LlamaModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config,
                       LoadOptions options)
    : file_(std::move(file)),
      config_(std::move(config)),
      options_(options),
      act_(options.max_batch_tokens, config_.dim, config_.ffn_dim),
      attention_buffers_(options.max_batch_tokens, config_.dim, config_.kv_row_elems()),
      matmul_scratch_(options.max_batch_tokens, std::max(config_.dim, config_.ffn_dim)) {
  attention_shape_.num_heads = static_cast<int>(config_.num_heads);
  attention_shape_.num_kv_heads = static_cast<int>(config_.num_kv_heads);
  attention_shape_.head_dim = static_cast<int>(config_.head_dim);
  attention_shape_.scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
  rope_.head_dim = static_cast<int>(config_.head_dim);
  rope_.rope_dim = static_cast<int>(config_.rope_dim);
  rope_.freq_base = config_.rope_freq_base;
  rope_.linear_scale = config_.rope_linear_scale;
  const gguf::GgufFile& f = *file_;
  token_embd_ = BindMatrix(f, "token_embd.weight");
  output_ = config_.tied_output ? token_embd_ : BindMatrix(f, "output.weight");
  output_norm_ = BindVector(f, "output_norm.weight");
  for (int l = 0; l < config_.num_layers; ++l) {
    attention_.push_back(BindAttention(f, l));
    ffn_.push_back(BindFfn(f, l));
  }
  seqs_.reserve(options_.max_batch_tokens);
  attention_scratch_ = std::make_unique<kernels::AttentionScratch>(
      attention_shape_, *options_.max_context_tokens, options_.max_threads);
}

void LlamaModel::Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) {
  CHECK_LE(pool.num_threads(), options_.max_threads) << "pool larger than LoadOptions::max_threads";
  const tensor::PagedKvView& cache = kv.paged.at(0);
  CHECK_EQ(static_cast<int64_t>(cache.layers.size()), config_.num_layers);
  CHECK_EQ(cache.row_elems, config_.kv_row_elems());
  FlattenBatch(batch,
               {config_.vocab_size, options_.max_batch_tokens, *options_.max_context_tokens, 1,
                cache.block_size},
               rows_);
  if (rows_.num_tokens == 0) return;
  AttentionSequencesOf(batch, rows_, /*group=*/0, seqs_);
  const float eps = config_.rms_norm_eps;
  Embed(token_embd_, rows_, act_.x.data(), pool);
  for (int l = 0; l < config_.num_layers; ++l) {
    AttentionBlock({&attention_[l], &attention_shape_, &rope_, eps, &cache, l}, rows_, seqs_, act_,
                   attention_buffers_, *attention_scratch_, matmul_scratch_, pool);
    GatedFfnBlock(ffn_[l], eps, rows_.num_tokens, act_, matmul_scratch_, pool);
  }
  Logits(batch, rows_, output_norm_, eps, output_, act_, matmul_scratch_, pool, logits);
}

}  // namespace kvserve::model
