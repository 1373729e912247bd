#include "model/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/weight_matrix.h"

namespace kvserve::model {
namespace {

kernels::WeightMatrix Matrix(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr) << name;  // ReadModelConfig checked
  Result<kernels::WeightMatrix> matrix = kernels::MatrixFromTensor(*info);
  CHECK(matrix.ok()) << matrix.status().ToString();
  return *matrix;
}

const float* Vector(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr && info->dtype == tensor::DType::kF32) << name;
  return reinterpret_cast<const float*>(info->data);
}

}  // namespace

int64_t ForwardBatch::NumTokens() const {
  int64_t n = 0;
  for (const SequenceInput& s : sequences) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

int64_t ForwardBatch::NumLogitRows() const {
  return std::count_if(sequences.begin(), sequences.end(),
                       [](const SequenceInput& s) { return s.want_logits; });
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(std::shared_ptr<const gguf::GgufFile> file,
                                                     const LoadOptions& options) {
  CHECK(file != nullptr);
  KV_ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(*file));
  LoadOptions resolved = options;
  if (resolved.max_batch_tokens <= 0) return InvalidArgument("max_batch_tokens must be positive");
  if (!resolved.max_context_tokens) {
    resolved.max_context_tokens =
        static_cast<int32_t>(std::min<int64_t>(config.context_length, INT32_MAX));
  }
  if (*resolved.max_context_tokens <= 0)
    return InvalidArgument("max_context_tokens must be positive");
  if (resolved.max_threads <= 0) resolved.max_threads = DefaultThreadCount();
  auto model = std::unique_ptr<LlamaModel>(new LlamaModel(std::move(file), config, resolved));
  return model;
}

LlamaModel::LlamaModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config,
                       LoadOptions options)
    : file_(std::move(file)),
      config_(std::move(config)),
      options_(options),
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
  BindWeights();
  AllocateScratch();
}

void LlamaModel::BindWeights() {
  const gguf::GgufFile& f = *file_;
  token_embd_ = Matrix(f, "token_embd.weight");
  output_ = config_.tied_output ? token_embd_ : Matrix(f, "output.weight");
  output_norm_ = Vector(f, "output_norm.weight");
  layers_.resize(config_.num_layers);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights& w = layers_[l];
    w.attn_norm = Vector(f, p + "attn_norm.weight");
    w.wq = Matrix(f, p + "attn_q.weight");
    w.wk = Matrix(f, p + "attn_k.weight");
    w.wv = Matrix(f, p + "attn_v.weight");
    w.wo = Matrix(f, p + "attn_output.weight");
    w.ffn_norm = Vector(f, p + "ffn_norm.weight");
    w.w_gate = Matrix(f, p + "ffn_gate.weight");
    w.w_up = Matrix(f, p + "ffn_up.weight");
    w.w_down = Matrix(f, p + "ffn_down.weight");
  }
}

void LlamaModel::AllocateScratch() {
  const int64_t t = options_.max_batch_tokens;
  const int64_t dim = config_.dim;
  const int64_t kv_row = config_.kv_row_elems();
  seqs_.reserve(t);
  tokens_.resize(t);
  positions_.resize(t);
  x_.resize(t * dim);
  xb_.resize(t * dim);
  q_.resize(t * dim);
  k_.resize(t * kv_row);
  v_.resize(t * kv_row);
  att_.resize(t * dim);
  proj_.resize(t * dim);
  gate_.resize(t * config_.ffn_dim);
  up_.resize(t * config_.ffn_dim);
  last_.resize(t * dim);
  attention_scratch_ = std::make_unique<kernels::AttentionScratch>(
      attention_shape_, *options_.max_context_tokens, options_.max_threads);
}

void LlamaModel::BuildSequences(const ForwardBatch& batch, const tensor::PagedKvView& kv) {
  CHECK_EQ(static_cast<int64_t>(kv.layers.size()), config_.num_layers);
  CHECK_EQ(kv.row_elems, config_.kv_row_elems());
  num_tokens_ = batch.NumTokens();
  CHECK_LE(num_tokens_, options_.max_batch_tokens) << "batch larger than max_batch_tokens";
  seqs_.clear();
  int64_t row = 0;
  for (const SequenceInput& s : batch.sequences) {
    CHECK(!s.tokens.empty()) << "a sequence in a batch needs at least one token";
    CHECK_GE(s.start_pos, 0);
    const int64_t end_pos = s.start_pos + static_cast<int64_t>(s.tokens.size());
    CHECK_LE(end_pos, *options_.max_context_tokens) << "sequence longer than max_context_tokens";
    CHECK_LE(end_pos, static_cast<int64_t>(s.block_table.size()) * kv.block_size)
        << "block table does not cover the step's positions";
    seqs_.push_back({row, static_cast<int32_t>(s.tokens.size()), s.start_pos, s.block_table});
    for (size_t i = 0; i < s.tokens.size(); ++i, ++row) {
      CHECK(s.tokens[i] >= 0 && s.tokens[i] < config_.vocab_size) << "token " << s.tokens[i];
      tokens_[row] = s.tokens[i];
      positions_[row] = s.start_pos + static_cast<int32_t>(i);
    }
  }
}

void LlamaModel::Forward(const ForwardBatch& batch, const tensor::PagedKvView& kv, ThreadPool& pool,
                         float* logits) {
  CHECK_LE(pool.num_threads(), options_.max_threads) << "pool larger than LoadOptions::max_threads";
  BuildSequences(batch, kv);
  if (num_tokens_ == 0) return;
  Embed(pool);
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    AttentionBlock(layer, kv, pool);
    FeedForwardBlock(layer, pool);
  }
  Logits(batch, pool, logits);
}

void LlamaModel::Embed(ThreadPool& pool) {
  const int64_t dim = config_.dim;
  pool.ParallelFor(num_tokens_, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::EmbeddingLookup(token_embd_.data, token_embd_.dtype, dim, tokens_[t],
                               x_.data() + t * dim);
    }
  });
}

void LlamaModel::NormRows(const float* weight, const float* in, float* out, int64_t rows,
                          ThreadPool& pool) {
  const int64_t dim = config_.dim;
  pool.ParallelFor(rows, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::RmsNorm(in + t * dim, weight, out + t * dim, dim, config_.rms_norm_eps);
    }
  });
}

void LlamaModel::AttentionBlock(int layer, const tensor::PagedKvView& kv, ThreadPool& pool) {
  const LayerWeights& w = layers_[layer];
  const int64_t n = num_tokens_;
  const int64_t dim = config_.dim;
  const int64_t kv_row = config_.kv_row_elems();
  // 1. Q, K, V of this step's tokens, roped at their positions.
  NormRows(w.attn_norm, x_.data(), xb_.data(), n, pool);
  kernels::MatMul(w.wq, xb_.data(), n, q_.data(), pool, matmul_scratch_);
  kernels::MatMul(w.wk, xb_.data(), n, k_.data(), pool, matmul_scratch_);
  kernels::MatMul(w.wv, xb_.data(), n, v_.data(), pool, matmul_scratch_);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::Rope(rope_, q_.data() + t * dim, attention_shape_.num_heads, positions_[t]);
      kernels::Rope(rope_, k_.data() + t * kv_row, attention_shape_.num_kv_heads, positions_[t]);
    }
  });
  // 2. Store K/V in the cache, then 3. attend reading everything back as stored.
  kernels::WriteKv(kv, layer, seqs_, k_.data(), v_.data(), pool);
  kernels::PagedAttention(attention_shape_, kv, layer, seqs_, q_.data(), att_.data(), pool,
                          *attention_scratch_);
  // 4. Output projection and residual.
  kernels::MatMul(w.wo, att_.data(), n, proj_.data(), pool, matmul_scratch_);
  kernels::AddInPlace(x_.data(), proj_.data(), n * dim);
}

void LlamaModel::FeedForwardBlock(int layer, ThreadPool& pool) {
  const LayerWeights& w = layers_[layer];
  const int64_t n = num_tokens_;
  const int64_t ffn = config_.ffn_dim;
  NormRows(w.ffn_norm, x_.data(), xb_.data(), n, pool);
  kernels::MatMul(w.w_gate, xb_.data(), n, gate_.data(), pool, matmul_scratch_);
  kernels::MatMul(w.w_up, xb_.data(), n, up_.data(), pool, matmul_scratch_);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::SiluMul(gate_.data() + t * ffn, up_.data() + t * ffn, ffn);
    }
  });
  kernels::MatMul(w.w_down, gate_.data(), n, proj_.data(), pool, matmul_scratch_);
  kernels::AddInPlace(x_.data(), proj_.data(), n * config_.dim);
}

void LlamaModel::Logits(const ForwardBatch& batch, ThreadPool& pool, float* logits) {
  const int64_t dim = config_.dim;
  int64_t num_rows = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    if (!batch.sequences[i].want_logits) continue;
    const kernels::AttentionSequence& s = seqs_[i];
    const int64_t last_row = s.first_row + s.num_tokens - 1;
    std::copy_n(x_.data() + last_row * dim, dim, last_.data() + num_rows * dim);
    ++num_rows;
  }
  if (num_rows == 0) return;
  CHECK(logits != nullptr);
  NormRows(output_norm_, last_.data(), last_.data(), num_rows, pool);
  kernels::MatMul(output_, last_.data(), num_rows, logits, pool, matmul_scratch_);
}

}  // namespace kvserve::model
