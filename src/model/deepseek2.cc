#include "model/deepseek2.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "core/check.h"

namespace kvserve::model {
namespace {

std::string Name(int layer, std::string_view suffix) {
  return fmt::format("blk.{}.{}", layer, suffix);
}

}  // namespace

Result<std::unique_ptr<Deepseek2Model>> Deepseek2Model::Load(
    std::shared_ptr<const gguf::GgufFile> file, const LoadOptions& options) {
  CHECK(file != nullptr);
  KV_ASSIGN_OR_RETURN(Deepseek2Config config, ReadDeepseek2Config(*file));
  if (!config.has_weights) {
    return InvalidArgument(
        "this deepseek2 file has no weights (a shape-only preset for plan and inspect)");
  }
  KV_ASSIGN_OR_RETURN(LoadOptions resolved, ResolveLoadOptions(options, config.context_length));
  return std::unique_ptr<Deepseek2Model>(
      new Deepseek2Model(std::move(file), std::move(config), resolved));
}

Deepseek2Model::Deepseek2Model(std::shared_ptr<const gguf::GgufFile> file, Deepseek2Config config,
                               LoadOptions options)
    : file_(std::move(file)),
      config_(std::move(config)),
      options_(options),
      act_(options.max_batch_tokens, config_.dim, std::max<int64_t>(config_.ffn_dim, 1)) {
  const Deepseek2Config& c = config_;
  const int64_t t = options_.max_batch_tokens, h = c.num_heads;
  rope_.head_dim = static_cast<int>(c.qk_head_dim());
  rope_.rope_dim = static_cast<int>(c.rope_dim);
  rope_.freq_base = c.rope_freq_base;
  mla_.num_heads = static_cast<int>(h);
  mla_.kv_lora_rank = static_cast<int>(c.kv_lora_rank);
  mla_.rope_dim = static_cast<int>(c.rope_dim);
  mla_.scale =
      kernels::YarnAttentionScale(c.yarn, c.mscale_all_dim, static_cast<int>(c.qk_head_dim()));
  const gguf::GgufFile& f = *file_;
  token_embd_ = BindMatrix(f, "token_embd.weight");
  output_ = c.tied_output ? token_embd_ : BindMatrix(f, "output.weight");
  output_norm_ = BindVector(f, "output_norm.weight");
  for (int l = 0; l < c.num_layers; ++l) {
    AttentionWeights a;
    a.norm = BindVector(f, Name(l, "attn_norm.weight"));
    if (c.q_lora_rank > 0) {
      a.q_a = BindMatrix(f, Name(l, "attn_q_a.weight"));
      a.q_a_norm = BindVector(f, Name(l, "attn_q_a_norm.weight"));
      a.q_b = BindMatrix(f, Name(l, "attn_q_b.weight"));
    } else {
      a.q = BindMatrix(f, Name(l, "attn_q.weight"));
    }
    a.kv_a = BindMatrix(f, Name(l, "attn_kv_a_mqa.weight"));
    a.kv_a_norm = BindVector(f, Name(l, "attn_kv_a_norm.weight"));
    a.k_b = BindExperts(f, Name(l, "attn_k_b.weight"));
    a.v_b = BindExperts(f, Name(l, "attn_v_b.weight"));
    a.o = BindMatrix(f, Name(l, "attn_output.weight"));
    attention_.push_back(std::move(a));
    if (c.IsMoeLayer(l)) {
      moe_.push_back(BindMoe(f, c.moe, l));
    } else {
      dense_.push_back(BindFfn(f, l));
    }
  }
  q_.resize(t * h * c.qk_head_dim());
  q_a_.resize(t * c.q_lora_rank);
  latent_.resize(t * c.latent_dim());
  q_abs_.resize(t * h * c.latent_dim());
  o_.resize(t * h * c.latent_dim());
  att_.resize(t * h * c.v_head_dim);
  const int64_t head_cols = std::max({c.nope_dim, c.kv_lora_rank, c.v_head_dim});
  head_in_.resize(t * head_cols);
  head_out_.resize(t * head_cols);
  rope_cs_.resize(t * c.rope_dim);
  for (int i = 0; i < options_.max_threads; ++i) {
    head_lanes_.push_back(
        std::make_unique<HeadLane>(std::min(t, kWholeHeadMaxTokens), head_cols));
  }
  if (!moe_.empty()) moe_buffers_ = std::make_unique<MoeBuffers>(t, c.dim, c.moe);
  mla_scratch_ = std::make_unique<kernels::MlaScratch>(mla_, *options_.max_context_tokens,
                                                       options_.max_threads);
  const int64_t max_cols = std::max({c.dim, c.ffn_dim, c.q_lora_rank, c.kv_lora_rank, c.nope_dim,
                                     h * c.v_head_dim, c.moe.expert_ffn_dim, c.moe.shared_ffn_dim});
  matmul_scratch_ = std::make_unique<kernels::MatMulScratch>(t, max_cols);
  seqs_.reserve(options_.max_batch_tokens);
}

Deepseek2Model::HeadLane::HeadLane(int64_t tokens, int64_t cols)
    : scratch(tokens, cols), in(tokens * cols), out(tokens * cols) {}

void Deepseek2Model::PerHead(const std::vector<kernels::WeightMatrix>& w, int64_t n,
                             const float* in, int64_t in_row, int64_t in_head, float* out,
                             int64_t out_row, int64_t out_head, ThreadPool& pool) {
  // Head h on `p`, its n input and output rows copied through head_in and head_out.
  auto head = [&](size_t h, float* head_in, float* head_out, ThreadPool& p,
                  kernels::MatMulScratch& scratch) {
    const int64_t cols = w[h].cols, rows = w[h].rows;
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(in + t * in_row + h * in_head, cols, head_in + t * cols);
    }
    kernels::MatMul(w[h], head_in, n, head_out, p, scratch);
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(head_out + t * rows, rows, out + t * out_row + h * out_head);
    }
  };
  const int threads = pool.num_threads();
  if (threads == 1 || n > kWholeHeadMaxTokens) {
    for (size_t h = 0; h < w.size(); ++h) {
      head(h, head_in_.data(), head_out_.data(), pool, *matmul_scratch_);
    }
    return;
  }
  std::atomic<size_t> next{0};
  pool.ParallelFor(static_cast<size_t>(threads), [&](size_t, size_t, int lane) {
    HeadLane& l = *head_lanes_[lane];
    for (size_t h; (h = next.fetch_add(1, std::memory_order_relaxed)) < w.size();) {
      head(h, l.in.data(), l.out.data(), l.serial, l.scratch);
    }
  });
}

void Deepseek2Model::Attention(int l, const tensor::PagedLatentView& kv, ThreadPool& pool) {
  const Deepseek2Config& c = config_;
  const AttentionWeights& w = attention_[l];
  const int64_t n = rows_.num_tokens, h = c.num_heads;
  const int64_t qk = c.qk_head_dim(), lat = c.latent_dim(), r = c.kv_lora_rank;
  kernels::MatMulScratch& mm = *matmul_scratch_;
  // 1. q (T, H, nope + rope) and the latent row [c | k_pe] (T, kv_lora + rope).
  NormRows(w.norm, act_.x.data(), act_.xb.data(), n, c.dim, c.rms_norm_eps, pool);
  // The latent and q (or q_a) from the same normed rows: xb quantized once for both.
  const kernels::MatMulOutput from_xb[] = {
      {&w.kv_a, latent_.data()},
      c.q_lora_rank > 0 ? kernels::MatMulOutput{&w.q_a, q_a_.data()}
                        : kernels::MatMulOutput{&w.q, q_.data()}};
  kernels::MatMulMany(from_xb, act_.xb.data(), n, pool, mm);
  if (c.q_lora_rank > 0) {
    NormRows(w.q_a_norm, q_a_.data(), q_a_.data(), n, c.q_lora_rank, c.rms_norm_eps, pool);
    kernels::MatMul(w.q_b, q_a_.data(), n, q_.data(), pool, mm);
  }
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      float* row = latent_.data() + t * lat;
      const float* cs = rope_cs_.data() + t * c.rope_dim;
      kernels::RmsNorm(row, w.kv_a_norm, row, r, c.rms_norm_eps);
      kernels::RopeRotate(rope_, cs, row + r, 1);
      float* q = q_.data() + t * h * qk;
      kernels::RopeRotate(rope_, cs, q + c.nope_dim, static_cast<int>(h));
      for (int64_t hh = 0; hh < h; ++hh) {  // q_pe after the absorbed part
        std::copy_n(q + hh * qk + c.nope_dim, c.rope_dim, q_abs_.data() + (t * h + hh) * lat + r);
      }
    }
  });
  // 2. q_abs[h] = W_kb[h] q_nope[h]; store the latent rows, then attend reading them back.
  PerHead(w.k_b, n, q_.data(), h * qk, qk, q_abs_.data(), h * lat, lat, pool);
  kernels::WriteLatentRows(kv, l, seqs_, latent_.data(), pool);
  kernels::MlaAttention(mla_, kv, l, seqs_, q_abs_.data(), o_.data(), pool, *mla_scratch_);
  // 3. att[h] = W_vb[h] o[h] (the first kv_lora values of each head's latent_dim); x += Wo att.
  PerHead(w.v_b, n, o_.data(), h * lat, lat, att_.data(), h * c.v_head_dim, c.v_head_dim, pool);
  kernels::MatMul(w.o, att_.data(), n, act_.proj.data(), pool, mm);
  AddResidualRows(act_.x.data(), act_.proj.data(), n, c.dim, pool);
}

void Deepseek2Model::Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool,
                             float* logits) {
  CHECK_LE(pool.num_threads(), options_.max_threads) << "pool larger than LoadOptions::max_threads";
  const tensor::PagedLatentView& cache = kv.latent.at(0);
  CHECK_EQ(static_cast<int64_t>(cache.layers.size()), config_.num_layers);
  CHECK_EQ(cache.latent_elems, config_.latent_dim());
  FlattenBatch(batch,
               {config_.vocab_size, options_.max_batch_tokens, *options_.max_context_tokens, 1,
                cache.block_size},
               rows_);
  if (rows_.num_tokens == 0) return;
  AttentionSequencesOf(batch, rows_, /*group=*/0, seqs_);
  pool.ParallelFor(rows_.num_tokens, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {  // one position's angles for every layer
      kernels::RopeYarnAngles(rope_, config_.yarn, rows_.positions[t],
                              rope_cs_.data() + t * config_.rope_dim);
    }
  });
  const float eps = config_.rms_norm_eps;
  Embed(token_embd_, rows_, act_.x.data(), pool);
  for (int l = 0; l < config_.num_layers; ++l) {
    Attention(l, cache, pool);
    if (config_.IsMoeLayer(l)) {
      MoeFfnBlock(moe_[l - config_.leading_dense], config_.moe, eps, rows_.num_tokens, act_,
                  *moe_buffers_, *matmul_scratch_, pool);
    } else {
      GatedFfnBlock(dense_[l], eps, rows_.num_tokens, act_, *matmul_scratch_, pool);
    }
  }
  Logits(batch, rows_, output_norm_, eps, output_, act_, *matmul_scratch_, pool, logits);
}

}  // namespace kvserve::model
