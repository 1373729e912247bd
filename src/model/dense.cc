#include "model/dense.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/kv_layout.h"

namespace kvserve::model {
namespace {

int64_t MaxCols(const ModelConfig& c) {
  if (c.moe) {
    return std::max({c.dim, c.q_row_elems(), c.moe->expert_ffn_dim, c.moe->shared_ffn_dim});
  }
  return std::max({c.dim, c.q_row_elems(), c.ffn_dim});
}

// The dense FFN's width in the activations: none for a mixture of experts (its buffers are
// MoeBuffers).
int64_t DenseFfnDim(const ModelConfig& c) {
  return c.moe ? 0 : c.ffn_dim;
}

// The rotary embedding of layer `l`: sliding layers may have their own base and scaling
// (gemma3); the angle divisors are the long factors when the run's context exceeds the
// original one (llama.cpp's get_rope_factors), else the short ones.
kernels::RopeParams RopeOf(const ModelConfig& c, const gguf::GgufFile& file, int64_t layer,
                           int32_t max_context_tokens) {
  kernels::RopeParams rope;
  rope.head_dim = static_cast<int>(c.head_dim);
  rope.rope_dim = static_cast<int>(c.rope_dim);
  rope.style = c.rope_style;
  rope.freq_base = c.IsSliding(layer) ? c.rope_freq_base_sliding : c.rope_freq_base;
  rope.linear_scale = c.IsSliding(layer) ? c.rope_linear_scale_sliding : c.rope_linear_scale;
  rope.attn_factor = c.rope_attn_factor;
  rope.yarn = c.yarn;
  const std::string& factors =
      max_context_tokens > c.rope_original_context ? c.rope_factors_long : c.rope_factors_short;
  if (!factors.empty()) rope.freq_factors = BindVector(file, factors);
  return rope;
}

}  // namespace

Result<std::unique_ptr<DenseModel>> DenseModel::Load(std::shared_ptr<const gguf::GgufFile> file,
                                                     const LoadOptions& options) {
  CHECK(file != nullptr);
  KV_ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(*file));
  KV_ASSIGN_OR_RETURN(LoadOptions resolved, ResolveLoadOptions(options, config.context_length));
  return std::unique_ptr<DenseModel>(new DenseModel(std::move(file), config, resolved));
}

DenseModel::DenseModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config,
                       LoadOptions options)
    : file_(std::move(file)),
      config_(std::move(config)),
      options_(options),
      act_(options.max_batch_tokens, config_.dim, DenseFfnDim(config_), config_.fused_gate_up),
      attention_buffers_(options.max_batch_tokens, config_.q_row_elems(), config_.kv_row_elems(),
                         config_.fused_qkv),
      matmul_scratch_(options.max_batch_tokens, MaxCols(config_)) {
  const ModelConfig& c = config_;
  const DenseKvShape kv_shape{static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                              static_cast<int>(c.head_dim),
                              std::vector<int>(c.layer_window.begin(), c.layer_window.end())};
  const std::vector<DenseKvGroup> groups = DenseKvGroups(kv_shape);
  num_groups_ = static_cast<int>(groups.size());
  group_of_layer_.resize(c.num_layers);
  for (int g = 0; g < num_groups_; ++g) {
    for (int l : groups[g].layers) group_of_layer_[l] = g;
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    kernels::AttentionShape shape;
    shape.num_heads = static_cast<int>(c.num_heads);
    shape.num_kv_heads = static_cast<int>(c.num_kv_heads);
    shape.head_dim = static_cast<int>(c.head_dim);
    shape.scale = c.attention_scale;
    if (c.IsSliding(l)) shape.window = c.layer_window[l];
    shape.softcap = c.attn_softcap;
    if (c.attn_sinks) shape.sinks = BindVector(*file_, fmt::format("blk.{}.attn_sinks.weight", l));
    shapes_.push_back(shape);
    ropes_.push_back(RopeOf(c, *file_, l, *options_.max_context_tokens));
    int table = static_cast<int>(rope_tables_.size());
    for (int64_t e = 0; e < l; ++e) {
      if (kernels::SameRopeAngles(ropes_[e], ropes_[l])) table = rope_table_of_layer_[e];
    }
    if (table == static_cast<int>(rope_tables_.size())) {
      rope_tables_.emplace_back(static_cast<size_t>(options_.max_batch_tokens * c.rope_dim));
    }
    rope_table_of_layer_.push_back(table);
  }
  BindLayers();
  if (c.moe) moe_buffers_ = std::make_unique<MoeBuffers>(options_.max_batch_tokens, c.dim, *c.moe);
  seqs_.resize(num_groups_);
  for (auto& s : seqs_) s.reserve(options_.max_batch_tokens);
  attention_scratch_ = std::make_unique<kernels::AttentionScratch>(
      shapes_[0], *options_.max_context_tokens, options_.max_threads);
}

void DenseModel::BindLayers() {
  const gguf::GgufFile& f = *file_;
  token_embd_ = BindMatrix(f, "token_embd.weight");
  output_ = config_.tied_output ? token_embd_ : BindMatrix(f, "output.weight");
  output_norm_ = BindVector(f, "output_norm.weight");
  for (int l = 0; l < config_.num_layers; ++l) {
    attention_.push_back(BindAttention(f, l, config_));
    if (config_.moe) {
      moe_.push_back(BindMoe(f, *config_.moe, l));
    } else {
      ffn_.push_back(BindFfn(f, l, config_));
    }
  }
}

void DenseModel::Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) {
  CHECK_LE(pool.num_threads(), options_.max_threads) << "pool larger than LoadOptions::max_threads";
  CHECK_EQ(static_cast<int>(kv.paged.size()), num_groups_);
  for (const tensor::PagedKvView& view : kv.paged) {
    CHECK_EQ(static_cast<int64_t>(view.layers.size()), config_.num_layers);
    CHECK_EQ(view.row_elems, config_.kv_row_elems());
  }
  FlattenBatch(batch,
               {config_.vocab_size, options_.max_batch_tokens, *options_.max_context_tokens,
                num_groups_, kv.paged[0].block_size},
               rows_);
  if (rows_.num_tokens == 0) return;
  for (int g = 0; g < num_groups_; ++g) AttentionSequencesOf(batch, rows_, g, seqs_[g]);
  const float eps = config_.rms_norm_eps;
  Embed(token_embd_, rows_, act_.x.data(), pool, config_.embedding_scale);
  // Each table from the first layer using it (tables are numbered in order of first use).
  for (int l = 0, next = 0; l < config_.num_layers; ++l) {
    if (rope_table_of_layer_[l] != next) continue;
    RopeAnglesRows(ropes_[l], rows_, rope_tables_[next++].data(), pool);
  }
  for (int l = 0; l < config_.num_layers; ++l) {
    const int g = group_of_layer_[l];
    AttentionBlock({&attention_[l], &shapes_[l], &ropes_[l], eps, &kv.paged[g], l,
                    rope_tables_[rope_table_of_layer_[l]].data()},
                   rows_, seqs_[g], act_, attention_buffers_, *attention_scratch_, matmul_scratch_,
                   pool);
    if (config_.moe) {
      MoeFfnBlock(moe_[l], *config_.moe, eps, rows_.num_tokens, act_, *moe_buffers_,
                  matmul_scratch_, pool);
    } else {
      GatedFfnBlock(ffn_[l], eps, rows_.num_tokens, act_, matmul_scratch_, pool);
    }
  }
  Logits(batch, rows_, output_norm_, eps, output_, act_, matmul_scratch_, pool, logits,
         config_.final_softcap);
}

}  // namespace kvserve::model
