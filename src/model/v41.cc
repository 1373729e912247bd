#include "model/v41.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

int MaxRatio(const V41Config& c) {
  int r = 1;
  for (const V41Source& s : c.sources) r = std::max(r, s.ratio);
  return r;
}

}  // namespace

Result<std::unique_ptr<V41Model>> V41Model::Load(std::shared_ptr<const gguf::GgufFile> file,
                                                 const LoadOptions& options) {
  CHECK(file != nullptr);
  KV_ASSIGN_OR_RETURN(V41Config config, ReadV41Config(*file));
  if (!config.has_weights) return InvalidArgument("the model file has no weights (shape only)");
  KV_ASSIGN_OR_RETURN(LoadOptions resolved, ResolveLoadOptions(options, config.context_length));
  return std::unique_ptr<V41Model>(new V41Model(std::move(file), std::move(config), resolved));
}

V41Model::V41Model(std::shared_ptr<const gguf::GgufFile> file, V41Config config,
                   LoadOptions options)
    : file_(std::move(file)),
      config_(std::move(config)),
      options_(options),
      act_(options.max_batch_tokens, config_.dim, config_.ffn_dim) {
  layout_ = MakeV41KvLayout(config_, 16, 16, 0);
  const int64_t d = config_.latent_dim;
  const int64_t h = config_.num_heads;
  rope_ = {static_cast<int>(d), static_cast<int>(config_.rope_dim), config_.rope_freq_base, 1.0};
  BindWeights();
  const int64_t t = options_.max_batch_tokens;
  const int64_t max_ratio = MaxRatio(config_);
  q_.resize(t * h * d);
  att_.resize(t * h * d);
  row_.resize(t * d);
  q_idx_.resize(t * config_.index_heads * config_.index_dim);
  w_idx_.resize(t * config_.index_heads);
  cin_.resize(t * max_ratio * d);
  centry_.resize(t * d);
  kidx_.resize(t * config_.index_dim);
  entry_pos_.resize(t);
  entry_seq_.resize(t);
  seqs_.resize(layout_.kv_config.groups.size());
  for (auto& s : seqs_) s.reserve(t);
  kernels::HybridAttentionShape shape;
  shape.num_heads = static_cast<int>(h);
  shape.head_dim = static_cast<int>(d);
  shape.window = config_.window;
  shape.index_heads = static_cast<int>(config_.index_heads);
  shape.index_dim = static_cast<int>(config_.index_dim);
  shape.top_k = static_cast<int>(config_.index_top_k);
  attention_scratch_ = std::make_unique<kernels::HybridAttentionScratch>(
      shape, *options_.max_context_tokens, options_.max_threads);
  const int64_t max_cols = std::max({config_.dim, config_.ffn_dim, h * d, max_ratio * d, d});
  matmul_scratch_ = std::make_unique<kernels::MatMulScratch>(t, max_cols);
}

void V41Model::BindWeights() {
  const gguf::GgufFile& f = *file_;
  token_embd_ = BindMatrix(f, "token_embd.weight");
  output_ = BindMatrix(f, "output.weight");
  output_norm_ = BindVector(f, "output_norm.weight");
  layers_.resize(config_.num_layers);
  for (int l = 0; l < config_.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights& w = layers_[l];
    w.attn_norm = BindVector(f, p + "attn_norm.weight");
    w.wq = BindMatrix(f, p + "attn_q.weight");
    w.wkv = BindMatrix(f, p + "attn_kv.weight");
    w.wo = BindMatrix(f, p + "attn_output.weight");
    if (std::optional<V41Source> s = config_.SourceOf(l)) {
      if (s->layer == l) {
        w.compress = BindMatrix(f, p + "compress.weight");
        w.idx_k = BindMatrix(f, p + "indexer_k.weight");
      }
      w.idx_q = BindMatrix(f, p + "indexer_q.weight");
      w.idx_w = BindMatrix(f, p + "indexer_w.weight");
    }
    w.ffn = BindFfn(f, l);
  }
}

void V41Model::BuildSequences(const Batch& batch) {
  for (auto& s : seqs_) s.clear();
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& s = batch.sequences[i];
    for (size_t g = 0; g < seqs_.size(); ++g) {
      seqs_[g].push_back({rows_.first_row[i], static_cast<int32_t>(s.tokens.size()), s.start_pos,
                          s.block_tables[0],
                          g == 0 ? std::span<const int32_t>() : s.block_tables[g]});
    }
  }
}

void V41Model::Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) {
  CHECK_LE(pool.num_threads(), options_.max_threads);
  CHECK_EQ(kv.latent.size(), seqs_.size());
  CHECK_EQ(kv.paged.at(0).row_elems, config_.latent_dim);
  FlattenBatch(batch,
               {config_.vocab_size, options_.max_batch_tokens, *options_.max_context_tokens,
                static_cast<int>(seqs_.size()), kv.paged[0].block_size},
               rows_);
  if (rows_.num_tokens == 0) return;
  BuildSequences(batch);
  const float eps = config_.rms_norm_eps;
  Embed(token_embd_, rows_, act_.x.data(), pool);
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    AttentionBlock(layer, kv, pool);
    GatedFfnBlock(layers_[layer].ffn, eps, rows_.num_tokens, act_, *matmul_scratch_, pool);
  }
  Logits(batch, rows_, output_norm_, eps, output_, act_, *matmul_scratch_, pool, logits);
}

// Entries completed by this step's tokens: entry i (tokens [r*i, r*i + r)) when r*i + r - 1 is
// one of the step's positions. Example: r = 2, a chunk of positions 3..7 completes entries
// 1 (tokens 2, 3), 2 (4, 5) and 3 (6, 7); token 2 was stored by an earlier step.
void V41Model::WriteEntries(int layer, const KvViews& kv, ThreadPool& pool) {
  const V41LayerKv& lk = layout_.layers[layer];
  const int r = lk.ratio;
  const int64_t d = config_.latent_dim;
  const tensor::PagedKvView& win = kv.paged[0];
  const auto& seqs = seqs_[*lk.latent_group];
  int64_t e = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const kernels::HybridSequence& s = seqs[si];
    for (int32_t p = s.start_pos; p < s.start_pos + s.num_tokens; ++p) {
      if ((p + 1) % r != 0) continue;
      const int32_t first = p + 1 - r;
      for (int j = 0; j < r; ++j) {
        const int32_t pos = first + j;
        tensor::DequantizeRow(
            win.dtype,
            win.KSegment(lk.window_slot, s.window_table[pos / win.block_size], pos % win.block_size, 0),
            cin_.data() + (e * r + j) * d, d);
      }
      entry_pos_[e] = first;
      entry_seq_[e] = static_cast<int64_t>(si);
      ++e;
    }
  }
  if (e == 0) return;
  const LayerWeights& w = layers_[layer];
  kernels::MatMul(w.compress, cin_.data(), e, centry_.data(), pool, *matmul_scratch_);
  kernels::MatMul(w.idx_k, centry_.data(), e, kidx_.data(), pool, *matmul_scratch_);
  const tensor::PagedLatentView& lat = kv.latent[*lk.latent_group];
  for (int64_t k = 0; k < e; ++k) {
    float* c = centry_.data() + k * d;
    kernels::Rope(rope_, c + (d - config_.rope_dim), 1, entry_pos_[k]);
    const int32_t first = entry_pos_[k];
    const int32_t block = seqs[entry_seq_[k]].latent_table[first / lat.block_size];
    const int slot = (first % lat.block_size) / r;
    tensor::QuantizeRow(lat.latent_dtype, c, lat.LatentRow(lk.latent_slot, block, slot), d);
    tensor::QuantizeRow(lat.index_dtype, kidx_.data() + k * config_.index_dim,
                        lat.IndexRow(lk.latent_slot, block, slot), config_.index_dim);
  }
}

void V41Model::AttentionBlock(int layer, const KvViews& kv, ThreadPool& pool) {
  const LayerWeights& w = layers_[layer];
  const V41LayerKv& lk = layout_.layers[layer];
  const int64_t n = rows_.num_tokens;
  const int64_t d = config_.latent_dim;
  const int heads = static_cast<int>(config_.num_heads);
  const int64_t rope_offset = d - config_.rope_dim;
  float* xb = act_.xb.data();
  // 1. q and the KV row, roped on their last rope_dim values.
  NormRows(w.attn_norm, act_.x.data(), xb, n, config_.dim, config_.rms_norm_eps, pool);
  kernels::MatMul(w.wq, xb, n, q_.data(), pool, *matmul_scratch_);
  kernels::MatMul(w.wkv, xb, n, row_.data(), pool, *matmul_scratch_);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::Rope(rope_, q_.data() + t * heads * d + rope_offset, heads, rows_.positions[t]);
      kernels::Rope(rope_, row_.data() + t * d + rope_offset, 1, rows_.positions[t]);
    }
  });
  // 2. Store the window rows, then the entries they complete (source layers).
  kernels::WriteWindowRows(kv.paged[0], lk.window_slot, seqs_[0], row_.data());
  if (lk.writes_latent) WriteEntries(layer, kv, pool);
  // 3. The indexer's query and head weights, then attention over window + selected entries.
  kernels::HybridAttentionShape shape;
  shape.num_heads = heads;
  shape.head_dim = static_cast<int>(d);
  shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  shape.window = config_.window;
  shape.index_heads = static_cast<int>(config_.index_heads);
  shape.index_dim = static_cast<int>(config_.index_dim);
  shape.top_k = static_cast<int>(config_.index_top_k);
  shape.candidate_blocks = static_cast<int>(config_.candidate_blocks);
  shape.candidate_block_size = static_cast<int>(config_.candidate_block_size);
  const tensor::PagedLatentView* latent = nullptr;
  int group = 0;
  if (lk.latent_group) {
    group = *lk.latent_group;
    shape.ratio = lk.ratio;
    latent = &kv.latent[group];
    kernels::MatMul(w.idx_q, xb, n, q_idx_.data(), pool, *matmul_scratch_);
    kernels::MatMul(w.idx_w, xb, n, w_idx_.data(), pool, *matmul_scratch_);
  }
  kernels::HybridAttention(shape, kv.paged[0], lk.window_slot, latent, lk.latent_slot, seqs_[group],
                           q_.data(), q_idx_.data(), w_idx_.data(), att_.data(), pool,
                           *attention_scratch_);
  // 4. Output projection and residual.
  kernels::MatMul(w.wo, att_.data(), n, act_.proj.data(), pool, *matmul_scratch_);
  AddResidualRows(act_.x.data(), act_.proj.data(), n, config_.dim, pool);
}

}  // namespace kvserve::model
