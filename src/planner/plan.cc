#include "planner/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/units.h"

namespace kvserve::planner {
namespace {

Status ValidateOptions(const PlanOptions& o, const ModelDesc& model) {
  if (o.num_gpus <= 0) return InvalidArgument("--num-gpus must be at least 1");
  if (o.tp <= 0) return InvalidArgument("--tp must be at least 1");
  if (o.num_gpus % o.tp != 0) {
    return InvalidArgument(
        fmt::format("--num-gpus {} is not a multiple of --tp {}", o.num_gpus, o.tp));
  }
  if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1)) {
    return InvalidArgument(
        fmt::format("--gpu-memory-utilization {} must be in (0, 1]", o.gpu_memory_utilization));
  }
  if (o.max_model_len <= 0) return InvalidArgument("--max-model-len must be at least 1");
  if (o.max_num_seqs <= 0) return InvalidArgument("--max-num-seqs must be at least 1");
  if (o.max_num_batched_tokens <= 0) {
    return InvalidArgument("--max-num-batched-tokens must be at least 1");
  }
  KV_RETURN_IF_ERROR(kv::ValidateBlockSize(o.block_size));
  for (const std::string& part : o.cpu_offload_parts) {
    const WeightPart* p = model.FindPart(part);
    if (p == nullptr) {
      std::vector<std::string> names;
      for (const WeightPart& w : model.parts) {
        if (w.offloadable) names.push_back(w.name);
      }
      return InvalidArgument(fmt::format(
          "--cpu-offload-weights {}: {} has no such part (offloadable: {})", part, model.name,
          names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
    }
    if (!p->offloadable) {
      return InvalidArgument(
          fmt::format("--cpu-offload-weights {}: this part of {} cannot "
                      "live in CPU memory",
                      part, model.name));
    }
  }
  return Status::Ok();
}

// Priority 1: weights on each device and in CPU memory.
void PlaceWeights(Plan& plan) {
  const int tp = plan.options.tp;
  for (const WeightPart& part : plan.model.parts) {
    WeightPlacement w{part.name, part.tp, false, part.bytes, 0, part.note};
    const auto& off = plan.options.cpu_offload_parts;
    w.offloaded = std::find(off.begin(), off.end(), part.name) != off.end();
    if (w.offloaded) {
      plan.cpu_weight_bytes += part.bytes;
    } else {
      // A sharded part splits evenly; round up so the per-device figure never undercounts.
      w.device_bytes =
          part.tp == TpPlacement::kReplicated ? part.bytes : (part.bytes + tp - 1) / tp;
    }
    plan.device_weight_bytes += w.device_bytes;
    plan.weights.push_back(std::move(w));
  }
}

// Priority 3: the pool left for KV on each device.
void SizeKvPool(Plan& plan) {
  const PlanOptions& o = plan.options;
  plan.usable_bytes = static_cast<uint64_t>(
      std::floor(o.gpu_memory_utilization * static_cast<double>(plan.device.memory_bytes)));
  plan.reserve_bytes = o.runtime_reserve_bytes.value_or(plan.model.runtime_reserve_bytes);
  if (o.kv_cache_memory_bytes) {
    plan.kv_budget_fixed = true;
    plan.kv_pool_bytes = static_cast<int64_t>(*o.kv_cache_memory_bytes);
    const uint64_t needed =
        plan.device_weight_bytes + plan.reserve_bytes + *o.kv_cache_memory_bytes;
    if (needed > plan.usable_bytes) {
      plan.notes.push_back(
          fmt::format("weights + reserve + --kv-cache-memory-bytes = {} exceeds the usable {}",
                      FormatBytes(needed), FormatBytes(plan.usable_bytes)));
    }
    return;
  }
  plan.kv_pool_bytes = static_cast<int64_t>(plan.usable_bytes) -
                       static_cast<int64_t>(plan.device_weight_bytes) -
                       static_cast<int64_t>(plan.reserve_bytes);
}

// True when the per-rank spec holds fewer KV heads than the model's (TP split them); a latent
// is one head. Compares heads, not bytes, so --kv-cache-dtype does not disturb it.
bool HeadsSplit(const kv::KvLayoutSpec& model_spec, const kv::KvLayoutSpec& rank_spec) {
  auto heads = [](const kv::KvLayoutSpec& spec) {
    if (const auto* f = std::get_if<kv::FullAttention>(&spec)) return f->num_kv_heads;
    if (const auto* s = std::get_if<kv::SlidingWindow>(&spec)) return s->num_kv_heads;
    return 1;
  };
  return heads(rank_spec) < heads(model_spec);
}

// Fills the per-group lines from the kv capacity (all byte counts come from kv/).
void DescribeGroups(Plan& plan) {
  const kv::KvCacheConfig& config = plan.kv_config;
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const KvGroupDesc& desc = plan.model.kv_groups[g];
    const kv::KvCacheGroup& group = config.groups[g];
    KvGroupPlan line;
    line.name = desc.name;
    line.spec = kv::DescribeSpec(group.spec);
    line.layers = FormatLayerList(desc.layers);
    line.readers = FormatLayerList(desc.readers);
    line.sliding = std::holds_alternative<kv::SlidingWindow>(group.spec);
    line.replicated_under_tp = plan.options.tp > 1 && !HeadsSplit(desc.spec, group.spec);
    line.capacity = plan.capacity.groups[g];
    line.per_token = line.capacity.bytes_per_token;
    const int64_t layers = static_cast<int64_t>(group.layers.size());
    if (line.sliding) {
      line.decode_seq_bytes =
          layers * kv::MaxMemoryBytes(group.spec, config.block_size, config.max_model_len, 1);
      line.prefill_seq_bytes =
          layers * kv::MaxMemoryBytes(group.spec, config.block_size, config.max_model_len,
                                      config.max_chunk_tokens);
      plan.fixed_seq_decode_bytes += line.decode_seq_bytes;
      plan.fixed_seq_prefill_bytes += line.prefill_seq_bytes;
    } else {
      plan.growing_bytes_per_token += line.per_token.bytes;
    }
    plan.groups.push_back(std::move(line));
  }
  if (plan.growing_bytes_per_token == 0) {  // sliding-only model: every token pays the window
    for (const KvGroupPlan& line : plan.groups)
      plan.growing_bytes_per_token += line.per_token.bytes;
  }
}

// CPU memory: offloaded weights plus the CPU KV tier (split evenly over the TP ranks).
void SizeCpu(Plan& plan) {
  plan.cpu_kv_tier_bytes = plan.options.kv_offloading_bytes;
  plan.cpu_total_bytes = plan.cpu_weight_bytes + plan.cpu_kv_tier_bytes;
  if (plan.cpu_kv_tier_bytes > 0 && plan.growing_bytes_per_token > 0) {
    const double per_rank = static_cast<double>(plan.cpu_kv_tier_bytes) / plan.options.tp;
    plan.cpu_kv_tier_tokens = static_cast<int64_t>(per_rank / plan.growing_bytes_per_token);
  }
}

Status ComputeKv(Plan& plan) {
  const PlanOptions& o = plan.options;
  KV_ASSIGN_OR_RETURN(plan.kv_config, PlanKvConfig(plan.model, o.tp, o.block_size, o.max_model_len,
                                                   o.max_num_batched_tokens, o.kv_cache_dtype));
  if (plan.kv_pool_bytes <= 0) {
    plan.notes.push_back(
        fmt::format("does not fit: weights + reserve exceed the usable memory "
                    "by {}",
                    FormatBytes(static_cast<uint64_t>(-plan.kv_pool_bytes))));
    return Status::Ok();
  }
  Result<kv::KvCapacity> cap = PlanKvCapacity(plan.kv_config, plan.kv_pool_bytes);
  if (!cap.ok()) {
    plan.notes.push_back("does not fit: " + cap.status().message());
    return Status::Ok();
  }
  plan.capacity = *std::move(cap);
  DescribeGroups(plan);
  plan.pool_over_bytes_per_token =
      static_cast<double>(plan.kv_pool_bytes) / plan.growing_bytes_per_token;
  plan.max_concurrency = static_cast<int64_t>(std::floor(plan.capacity.max_concurrency));
  plan.fits = plan.max_concurrency >= 1;
  if (!plan.fits) {
    plan.notes.push_back(
        fmt::format("does not fit: one request of {} tokens needs more than the "
                    "KV pool; lower --max-model-len",
                    o.max_model_len));
  }
  KV_ASSIGN_OR_RETURN(plan.longest_len_at_max_num_seqs,
                      LongestLenAt(plan.kv_config, plan.kv_pool_bytes, o.max_num_seqs,
                                   std::max(plan.model.max_model_len, o.max_model_len)));
  return Status::Ok();
}

}  // namespace

Result<std::optional<int64_t>> LongestLenAt(kv::KvCacheConfig config, uint64_t budget_bytes,
                                            int num_seqs, int64_t max_len) {
  auto fits = [&](int64_t len) -> Result<bool> {
    config.max_model_len = len;
    KV_ASSIGN_OR_RETURN(kv::KvCapacity cap, kv::ComputeCapacity(config, budget_bytes));
    return cap.max_concurrency >= num_seqs;
  };
  KV_ASSIGN_OR_RETURN(bool one_fits, fits(1));
  if (!one_fits) return std::optional<int64_t>();
  int64_t lo = 1;        // fits
  int64_t hi = max_len;  // candidate upper bound
  KV_ASSIGN_OR_RETURN(bool max_fits, fits(hi));
  if (max_fits) return std::optional<int64_t>(hi);
  while (hi - lo > 1) {  // invariant: lo fits, hi does not
    const int64_t mid = lo + (hi - lo) / 2;
    KV_ASSIGN_OR_RETURN(bool mid_fits, fits(mid));
    (mid_fits ? lo : hi) = mid;
  }
  return std::optional<int64_t>(lo);
}

Result<Plan> MakePlan(const ModelDesc& model, const DeviceDesc& device,
                      const PlanOptions& options) {
  Plan plan;
  plan.model = model;
  plan.device = device;
  plan.options = options;
  PlanOptions& o = plan.options;
  if (o.num_gpus == 0) o.num_gpus = std::max(o.tp, 1);
  if (o.tp == 0) o.tp = o.num_gpus;
  if (plan.options.max_model_len == 0) plan.options.max_model_len = model.max_model_len;
  KV_RETURN_IF_ERROR(ValidateOptions(plan.options, model));
  if (plan.options.max_model_len > model.max_model_len) {
    plan.notes.push_back(fmt::format("--max-model-len {} is beyond the model's {}",
                                     plan.options.max_model_len, model.max_model_len));
  }
  plan.num_replicas = plan.options.num_gpus / plan.options.tp;
  PlaceWeights(plan);
  SizeKvPool(plan);
  KV_RETURN_IF_ERROR(ComputeKv(plan));
  SizeCpu(plan);
  return plan;
}

}  // namespace kvserve::planner
