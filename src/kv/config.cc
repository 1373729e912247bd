#include "kv/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "core/units.h"

namespace kvserve::kv {
namespace {

bool IsSliding(const KvLayoutSpec& spec) {
  return std::holds_alternative<SlidingWindow>(spec);
}

Status ValidateGroupLayers(const KvCacheConfig& config, std::vector<int>& owner_count) {
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const KvCacheGroup& group = config.groups[g];
    if (group.layers.empty()) return InvalidArgument(fmt::format("KV group {} has no layers", g));
    auto mark = [&](int layer) -> Status {
      if (layer < 0 || layer >= config.num_layers) {
        return InvalidArgument(
            fmt::format("KV group {}: layer {} out of range [0, {})", g, layer, config.num_layers));
      }
      ++owner_count[layer];
      return Status::Ok();
    };
    for (int layer : group.layers) KV_RETURN_IF_ERROR(mark(layer));
    for (const KvReader& r : group.readers) {
      KV_RETURN_IF_ERROR(mark(r.layer));
      if (std::find(group.layers.begin(), group.layers.end(), r.source_layer) ==
          group.layers.end()) {
        return InvalidArgument(
            fmt::format("KV group {}: reader layer {} reads layer {}, "
                        "which is not a writer of the group",
                        g, r.layer, r.source_layer));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateConfig(const KvCacheConfig& config) {
  KV_RETURN_IF_ERROR(ValidateBlockSize(config.block_size));
  if (config.num_layers <= 0) return InvalidArgument("KV config: num_layers must be positive");
  if (config.groups.empty()) return InvalidArgument("KV config: no groups");
  if (config.max_model_len <= 0) return InvalidArgument("KV config: max_model_len must be > 0");
  for (const KvCacheGroup& group : config.groups) {
    KV_RETURN_IF_ERROR(ValidateSpec(group.spec, config.block_size));
  }
  std::vector<int> owner_count(config.num_layers, 0);
  KV_RETURN_IF_ERROR(ValidateGroupLayers(config, owner_count));
  for (int layer = 0; layer < config.num_layers; ++layer) {
    if (owner_count[layer] != 1) {
      return InvalidArgument(fmt::format("KV config: layer {} appears in {} groups (want 1)", layer,
                                         owner_count[layer]));
    }
  }
  return Status::Ok();
}

int64_t GroupBlockBytes(const KvCacheConfig& config, int group) {
  const KvCacheGroup& g = config.groups.at(group);
  return PageSizeBytes(g.spec, config.block_size) * static_cast<int64_t>(g.layers.size());
}

Result<KvCapacity> ComputeCapacity(const KvCacheConfig& config, uint64_t budget_bytes) {
  KV_RETURN_IF_ERROR(ValidateConfig(config));
  KvCapacity cap;
  unsigned __int128 request_bytes = 0;  // M: one max-length request, all groups
  uint64_t null_bytes = 0;
  for (size_t g = 0; g < config.groups.size(); ++g) {
    GroupCapacity gc;
    gc.block_bytes = GroupBlockBytes(config, static_cast<int>(g));
    gc.max_blocks_per_request = MaxBlocksPerRequest(config.groups[g].spec, config.block_size,
                                                    config.max_model_len, config.max_chunk_tokens);
    gc.bytes_per_token = ComputeBytesPerToken(config.groups[g].spec,
                                              static_cast<int>(config.groups[g].layers.size()));
    request_bytes += static_cast<unsigned __int128>(gc.max_blocks_per_request) * gc.block_bytes;
    null_bytes += static_cast<uint64_t>(gc.block_bytes);
    cap.bytes_per_token += gc.bytes_per_token.bytes;
    cap.groups.push_back(std::move(gc));
  }
  if (budget_bytes <= null_bytes) {
    return InvalidArgument(fmt::format("KV budget {} cannot hold one block per group ({} B)",
                                       FormatBytes(budget_bytes), null_bytes));
  }
  const uint64_t usable = budget_bytes - null_bytes;
  cap.max_concurrency = static_cast<double>(usable) / static_cast<double>(request_bytes);
  int64_t min_tokens = std::numeric_limits<int64_t>::max();
  int64_t min_sliding_tokens = std::numeric_limits<int64_t>::max();
  for (GroupCapacity& gc : cap.groups) {
    const unsigned __int128 share =
        static_cast<unsigned __int128>(usable) * gc.max_blocks_per_request / request_bytes;
    gc.num_blocks = static_cast<int64_t>(share) + 1;
    gc.arena_bytes = gc.num_blocks * gc.block_bytes;
    cap.total_arena_bytes += gc.arena_bytes;
  }
  for (size_t g = 0; g < cap.groups.size(); ++g) {
    const int64_t tokens = (cap.groups[g].num_blocks - 1) * config.block_size;
    int64_t& slot = IsSliding(config.groups[g].spec) ? min_sliding_tokens : min_tokens;
    slot = std::min(slot, tokens);
  }
  cap.num_tokens =
      min_tokens != std::numeric_limits<int64_t>::max() ? min_tokens : min_sliding_tokens;
  cap.formula = fmt::format(
      "({} B budget - {} B null blocks) / {} B per request of {} tokens = {:.2f}", budget_bytes,
      null_bytes, static_cast<uint64_t>(request_bytes), config.max_model_len, cap.max_concurrency);
  return cap;
}

std::vector<std::string> FormatCapacityReport(const KvCacheConfig& config,
                                              const KvCapacity& capacity) {
  std::vector<std::string> lines;
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const KvCacheGroup& group = config.groups[g];
    const GroupCapacity& gc = capacity.groups[g];
    lines.push_back(fmt::format(
        "KV group {} {}: {} writer layers, {} reader layers; bytes/token: {}; {} blocks x {} B "
        "= {}",
        g, SpecKindName(group.spec), group.layers.size(), group.readers.size(),
        gc.bytes_per_token.formula, gc.num_blocks, gc.block_bytes, FormatBytes(gc.arena_bytes)));
  }
  // Sliding groups hold a token only while it is inside the window: shown apart, so the
  // headline is what every token of context adds.
  double sliding_bytes = 0;
  for (size_t g = 0; g < config.groups.size(); ++g) {
    if (IsSliding(config.groups[g].spec)) sliding_bytes += capacity.groups[g].bytes_per_token.bytes;
  }
  const double growing_bytes = capacity.bytes_per_token - sliding_bytes;
  if (sliding_bytes > 0 && growing_bytes > 0) {
    lines.push_back(fmt::format(
        "KV bytes per token: {:g} B (+ {:g} B per token inside the sliding windows); arenas: {}",
        growing_bytes, sliding_bytes, FormatBytes(capacity.total_arena_bytes)));
  } else {
    lines.push_back(fmt::format("KV bytes per token: {:g} B; arenas: {}", capacity.bytes_per_token,
                                FormatBytes(capacity.total_arena_bytes)));
  }
  lines.push_back(
      fmt::format("KV cache: {} tokens (block size {})", capacity.num_tokens, config.block_size));
  lines.push_back(fmt::format("max concurrency at max-model-len {}: {:.2f} ({})",
                              config.max_model_len, capacity.max_concurrency, capacity.formula));
  return lines;
}

Result<tensor::DType> ParseKvCacheDType(std::string_view flag, tensor::DType model_dtype) {
  using tensor::DType;
  if (flag == "auto") return model_dtype == DType::kF32 ? DType::kF32 : DType::kF16;
  if (flag == "fp8") return DType::kFP8_E4M3_E8M0_32;
  if (flag == "fp4") return DType::kFP4_E2M1_E4M3_16;
  if (flag == "f32" || flag == "f16" || flag == "bf16" || flag == "q8_0") {
    return *tensor::DTypeFromName(flag);
  }
  return InvalidArgument(
      fmt::format("--kv-cache-dtype '{}': expected auto, f32, f16, bf16, q8_0, fp8 or fp4", flag));
}

Status ValidateBlockSize(int block_size) {
  if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0) {
    return InvalidArgument(
        fmt::format("--block-size {}: expected a power of two in [1, 1024]", block_size));
  }
  return Status::Ok();
}

Result<uint64_t> ParseKvBudget(std::string_view flag) {
  KV_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(flag));
  if (bytes == 0) return InvalidArgument("--kv-cache-memory-bytes must be greater than 0");
  return bytes;
}

uint64_t DefaultCpuKvBudgetBytes(uint64_t physical_bytes) {
  return std::min<uint64_t>(4 * kGiB, physical_bytes / 4);
}

uint64_t DefaultCpuKvBudgetBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 1 * kGiB;  // unknown: a conservative 1 GiB
  return DefaultCpuKvBudgetBytes(static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size));
}

std::string DescribeKvFormats(const KvCacheConfig& config) {
  std::string out;
  for (const KvCacheGroup& group : config.groups) {
    if (!out.empty()) out += ";";
    out += DescribeSpec(group.spec) + ":layers=" + fmt::format("{}", fmt::join(group.layers, ","));
    for (const KvReader& r : group.readers) out += fmt::format(",{}<-{}", r.layer, r.source_layer);
  }
  return out;
}

}  // namespace kvserve::kv
