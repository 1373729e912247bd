#include "sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvserve::sim {
namespace {

// sum_{x=1}^{m} floor(x / r): with m = q r + s, blocks of r equal values k = 1..q-1 plus
// q (s + 1) times q. Example r 2, m 5: 0+1+1+2+2 = 6 = 2 x 2 x 1 / 2 + 2 x 2.
double FloorSum(int64_t m, int64_t r) {
  if (m <= 0) return 0;
  const double q = static_cast<double>(m / r);
  const double s = static_cast<double>(m % r);
  return static_cast<double>(r) * q * (q - 1) / 2 + q * (s + 1);
}

// sum_{x=a}^{b} min(cap, floor(x / r)) for 1 <= a <= b; cap 0 means no cap.
double CappedFloorSum(int64_t a, int64_t b, int64_t r, int64_t cap) {
  if (b < a) return 0;
  if (cap <= 0) return FloorSum(b, r) - FloorSum(a - 1, r);
  const int64_t x0 = cap * r;  // floor(x / r) >= cap from here on
  const int64_t below_end = std::min(b, x0 - 1);
  double sum = below_end >= a ? FloorSum(below_end, r) - FloorSum(a - 1, r) : 0.0;
  const int64_t from = std::max(a, x0);
  if (b >= from) sum += static_cast<double>(cap) * static_cast<double>(b - from + 1);
  return sum;
}

// sum_{x=a}^{b} min(w, x) for 1 <= a <= b.
double CappedSum(int64_t a, int64_t b, int64_t w) {
  if (b < a) return 0;
  auto linear = [](int64_t lo, int64_t hi) {  // sum lo..hi
    return (static_cast<double>(lo) + static_cast<double>(hi)) * static_cast<double>(hi - lo + 1) / 2;
  };
  const int64_t below_end = std::min(b, w);
  double sum = below_end >= a ? linear(a, below_end) : 0.0;
  const int64_t from = std::max(a, w + 1);
  if (b >= from) sum += static_cast<double>(w) * static_cast<double>(b - from + 1);
  return sum;
}

int PerRank(int heads, int tp) { return heads % tp == 0 ? heads / tp : heads; }

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kGemm: return "gemm";
    case OpKind::kAttention: return "attention";
    case OpKind::kSampling: return "sampling";
    case OpKind::kAllReduce: return "allreduce";
    case OpKind::kOverhead: return "overhead";
  }
  return "unknown";
}

Work MatrixWork(const Matrix& m, int64_t rows, int tp) {
  const double share = m.replicated ? 1.0 : 1.0 / tp;
  const double n = static_cast<double>(rows);
  if (m.num_experts == 0) return {2.0 * n * m.params * share, m.bytes * share};
  const double e = m.num_experts;
  const double touched = e * (1.0 - std::pow(1.0 - m.experts_per_token / e, n));
  return {2.0 * n * m.experts_per_token * m.params * share, touched * m.bytes * share};
}

// Queries at positions p = c .. c + n - 1 (x = p + 1 runs over c + 1 .. c + n).
Work AttentionWork(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                   int64_t num_computed_tokens, int64_t num_new_tokens) {
  const int64_t a = num_computed_tokens + 1;
  const int64_t b = num_computed_tokens + num_new_tokens;
  if (const auto* f = std::get_if<kv::FullAttention>(&spec)) {
    const double pairs = CappedSum(a, b, b);
    return {4.0 * f->head_dim * heads.q_heads * pairs,
            static_cast<double>(b) * static_cast<double>(kv::TokenRowBytes(spec))};
  }
  if (const auto* s = std::get_if<kv::SlidingWindow>(&spec)) {
    const double pairs = CappedSum(a, b, s->window);
    const int64_t rows = std::min<int64_t>(b, s->window - 1 + num_new_tokens);
    return {4.0 * s->head_dim * heads.q_heads * pairs,
            static_cast<double>(rows) * static_cast<double>(kv::TokenRowBytes(spec))};
  }
  const auto& l = std::get<kv::CompressedLatent>(spec);
  const int64_t r = l.compress_ratio;
  const double selected = CappedFloorSum(a, b, r, heads.top_k);
  const int64_t entries = b / r;  // visible to the last query
  Work w;
  w.flops = 4.0 * l.latent_dim * heads.q_heads * selected;
  const double latent_row = static_cast<double>(tensor::RowBytes(l.latent_dtype, l.latent_dim));
  const int64_t read = heads.top_k > 0 ? std::min<int64_t>(entries, heads.top_k * num_new_tokens)
                                       : entries;
  w.bytes = static_cast<double>(read) * latent_row;
  return w;
}

Work IndexerWork(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                 int64_t num_computed_tokens, int64_t num_new_tokens) {
  const auto* l = std::get_if<kv::CompressedLatent>(&spec);
  if (l == nullptr || heads.top_k == 0 || l->index_key_dim == 0 || heads.index_heads == 0) {
    return {};
  }
  const int64_t a = num_computed_tokens + 1;
  const int64_t b = num_computed_tokens + num_new_tokens;
  const int64_t r = l->compress_ratio;
  return {2.0 * l->index_key_dim * heads.index_heads * CappedFloorSum(a, b, r, 0),
          static_cast<double>(b / r) *
              static_cast<double>(tensor::RowBytes(l->index_dtype, l->index_key_dim))};
}

double SharedKvBytes(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                     int64_t num_computed_tokens, int64_t num_new_tokens, int64_t shared) {
  const int64_t b = num_computed_tokens + num_new_tokens;
  shared = std::clamp<int64_t>(shared, 0, b);
  if (shared == 0) return 0;
  if (const auto* s = std::get_if<kv::SlidingWindow>(&spec)) {
    const int64_t first = b - std::min<int64_t>(b, s->window - 1 + num_new_tokens);  // read from
    return static_cast<double>(std::max<int64_t>(0, shared - first)) *
           static_cast<double>(kv::TokenRowBytes(spec));
  }
  if (std::holds_alternative<kv::FullAttention>(spec)) {
    return static_cast<double>(shared) * static_cast<double>(kv::TokenRowBytes(spec));
  }
  // Latent: the shared fraction of the entries read (all of them without top_k) and of the
  // index keys.
  const auto& l = std::get<kv::CompressedLatent>(spec);
  const int64_t entries = b / l.compress_ratio;
  if (entries == 0) return 0;
  const double fraction =
      static_cast<double>(shared / l.compress_ratio) / static_cast<double>(entries);
  return fraction * (AttentionWork(spec, heads, num_computed_tokens, num_new_tokens).bytes +
                     IndexerWork(spec, heads, num_computed_tokens, num_new_tokens).bytes);
}

double KvSpillSeconds(const HardwareProfile& h, double kv_bytes) {
  if (h.kv_spill_bandwidth <= 0) return 0;
  return std::max(0.0, kv_bytes - h.cached_kv_bytes) / h.kv_spill_bandwidth;
}

Result<CostModel> CostModel::Create(const ModelCompute& model, const kv::KvCacheConfig& kv_config,
                                    const HardwareProfile& hardware, int tp) {
  if (tp < 1) return InvalidArgument("--tp must be at least 1");
  if (model.num_q_heads % tp != 0) {
    return InvalidArgument(fmt::format("{} query heads do not split over tp {}",
                                       model.num_q_heads, tp));
  }
  if (tp > 1 && hardware.link_bandwidth <= 0) {
    return InvalidArgument(fmt::format("--tp {} needs a device link, and hardware profile {} has "
                                       "no link_bandwidth", tp, hardware.name));
  }
  CostModel c;
  c.model_ = model;
  c.hardware_ = hardware;
  c.tp_ = tp;
  c.heads_ = {model.num_q_heads / tp, PerRank(model.index_heads, tp), model.index_top_k};
  for (const kv::KvCacheGroup& g : kv_config.groups) {
    Group group{g.spec, static_cast<int>(g.layers.size() + g.readers.size()), 0};
    if (const auto* l = std::get_if<kv::CompressedLatent>(&g.spec); l && l->index_key_dim > 0) {
      Result<double> flops = hardware.GemmFlops(tensor::DTypeName(l->index_dtype));
      if (!flops.ok()) return flops.status().WithContext("the latent indexer");
      group.indexer_flops = *flops;
    }
    c.groups_.push_back(group);
  }
  for (const Matrix& m : model.matrices) {
    Result<double> flops = hardware.GemmFlops(m.dtype);
    if (!flops.ok()) return flops.status().WithContext("matrix " + m.name);
    c.gemm_flops_.push_back(*flops);
  }
  return c;
}

void CostModel::AddGemm(int64_t tokens, int64_t sampled, StepCost& cost) const {
  const double bandwidth = hardware_.MemoryBandwidth();
  for (size_t i = 0; i < model_.matrices.size(); ++i) {
    const Matrix& m = model_.matrices[i];
    const int64_t rows = m.logits_only ? sampled : tokens;
    if (rows == 0) continue;
    const Work w = MatrixWork(m, rows, tp_);
    const double seconds = std::max(w.flops / gemm_flops_[i], w.bytes / bandwidth);
    cost.work[0].flops += w.flops * m.num_layers;
    cost.work[0].bytes += w.bytes * m.num_layers;
    cost.seconds_by[0] += seconds * m.num_layers;
  }
}

void CostModel::AddAttention(std::span<const SequenceWork> batch, StepCost& cost) const {
  const double flops_rate = hardware_.AttentionFlops();
  const double bandwidth = hardware_.AttentionBandwidth();
  const int k = static_cast<int>(OpKind::kAttention);
  double footprint = 0;  // distinct KV bytes of the step
  for (const Group& g : groups_) {
    Work layer;
    double seconds = 0;
    double shared = 0;
    for (const SequenceWork& s : batch) {
      if (s.shared_prefix_tokens > 0) {
        shared += SharedKvBytes(g.spec, heads_, s.num_computed_tokens, s.num_new_tokens,
                                s.shared_prefix_tokens);
      }
      const Work w = AttentionWork(g.spec, heads_, s.num_computed_tokens, s.num_new_tokens);
      seconds += std::max(w.flops / flops_rate, w.bytes / bandwidth);
      layer += w;
      if (g.indexer_flops > 0) {
        const Work x = IndexerWork(g.spec, heads_, s.num_computed_tokens, s.num_new_tokens);
        seconds += std::max(x.flops / g.indexer_flops, x.bytes / bandwidth);
        layer += x;
      }
    }
    cost.work[k].flops += layer.flops * g.num_layers;
    cost.work[k].bytes += layer.bytes * g.num_layers;
    cost.seconds_by[k] += seconds * g.num_layers;
    footprint += (layer.bytes - shared) * g.num_layers;
  }
  cost.seconds_by[k] += KvSpillSeconds(hardware_, footprint);
}

StepCost CostModel::Cost(std::span<const SequenceWork> batch) const {
  StepCost cost;
  int64_t tokens = 0;
  int64_t sampled = 0;
  for (const SequenceWork& s : batch) {
    tokens += s.num_new_tokens;
    sampled += s.sampled ? 1 : 0;
  }
  AddGemm(tokens, sampled, cost);
  AddAttention(batch, cost);
  const HardwareProfile& h = hardware_;
  const double logits = static_cast<double>(sampled) * static_cast<double>(model_.vocab_size);
  const int ks = static_cast<int>(OpKind::kSampling);
  cost.work[ks] = {logits, logits * 16.0};
  cost.seconds_by[ks] = h.sampling_rate > 0 ? logits / h.sampling_rate
                                            : logits * 16.0 / h.MemoryBandwidth();
  if (tp_ > 1 && tokens > 0) {
    const int ka = static_cast<int>(OpKind::kAllReduce);
    const double payload = static_cast<double>(tokens) * static_cast<double>(model_.hidden_size) *
                           model_.activation_bytes;
    const double moved = 2.0 * (tp_ - 1) / tp_ * payload;
    const double count = 2.0 * model_.num_layers;
    cost.work[ka].bytes = count * moved;
    const double link = h.LinkBandwidth();
    cost.seconds_by[ka] = count * (h.link_latency + (link > 0 ? moved / link : 0.0));
  }
  const int ko = static_cast<int>(OpKind::kOverhead);
  const double sequences = static_cast<double>(batch.size());
  cost.seconds_by[ko] = h.step_overhead + h.engine_step_overhead +
                        (h.sequence_overhead + h.engine_sequence_overhead) * sequences +
                        (h.token_overhead + h.engine_token_overhead) * static_cast<double>(tokens);
  for (double s : cost.seconds_by) cost.seconds += s;
  return cost;
}

}  // namespace kvserve::sim
