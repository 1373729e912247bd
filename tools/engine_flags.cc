#include "tools/engine_flags.h"

#include <fmt/format.h>

#include "kv/config.h"
#include "offload/config.h"

namespace kvserve::tools {

void AddEngineFlags(CLI::App* cmd, EngineFlags& f, EngineFlagSet set) {
  cmd->add_option("--max-model-len", f.max_model_len,
                  "longest request, prompt + output (default: the model's context length, "
                  "lowered to what the KV budget holds)");
  cmd->add_option("-b,--max-num-batched-tokens,--batch-size", f.max_num_batched_tokens,
                  "most tokens per step (decodes first, then prefill chunks)")
      ->capture_default_str();
  cmd->add_option("--block-size", f.block_size, "tokens per KV block")->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes,--kv-cache-memory", f.kv_cache_memory,
                  "KV budget, e.g. 4GiB (default: min(4 GiB, 25% of RAM))");
  cmd->add_option("--kv-cache-dtype", f.kv_cache_dtype, "auto|f32|f16|bf16|q8_0|fp8|fp4")
      ->capture_default_str();
  if (set == EngineFlagSet::kKvLayout) return;
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "most requests running at once")
      ->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
                "prefix caching (default on)");
  cmd->add_option("-t,--threads", f.threads, "CPU threads (default: every core)");
  cmd->add_option("--speculative-config", f.speculative_config,
                  "speculative decoding as JSON, e.g. {\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4} (outputs unchanged; docs/speculative.md)");
  if (set == EngineFlagSet::kEngine) return;
  cmd->add_option("--kv-transfer-config", f.kv_transfer_config,
                  "KV offload tiers as JSON (OffloadingConnector; docs/offload.md)");
  cmd->add_option("--kv-offloading-size", f.kv_offloading_size,
                  "GiB of CPU memory for a KV offload tier (shorthand)");
}

Result<engine::EngineConfig> ResolveEngineFlags(const EngineFlags& f) {
  engine::EngineConfig c;
  if (f.max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be at least 1");
  c.max_num_seqs = f.max_num_seqs;
  if (f.max_num_batched_tokens < 1) {
    return InvalidArgument("--max-num-batched-tokens must be at least 1");
  }
  c.max_num_batched_tokens = f.max_num_batched_tokens;
  if (f.max_model_len < 0) return InvalidArgument("--max-model-len must be at least 1");
  if (f.max_model_len > 0) c.max_model_len = f.max_model_len;
  KV_RETURN_IF_ERROR(kv::ValidateBlockSize(f.block_size));
  c.block_size = f.block_size;
  if (!f.kv_cache_memory.empty()) {
    KV_ASSIGN_OR_RETURN(c.kv_cache_bytes, kv::ParseKvBudget(f.kv_cache_memory));
  }
  // The name is checked here; what "auto" means depends on the model (kv/config.h).
  KV_RETURN_IF_ERROR(kv::ParseKvCacheDType(f.kv_cache_dtype, tensor::DType::kF16).status());
  c.kv_cache_dtype = f.kv_cache_dtype;
  c.enable_prefix_caching = f.enable_prefix_caching;
  if (f.threads < 0) return InvalidArgument("--threads must be at least 1 (default: every core)");
  if (f.threads > 0) c.num_threads = f.threads;
  if (!f.speculative_config.empty()) {
    KV_ASSIGN_OR_RETURN(c.speculative, engine::ParseSpeculativeConfig(f.speculative_config));
  }
  if (!f.kv_transfer_config.empty() && !f.kv_offloading_size.empty()) {
    return InvalidArgument("give either --kv-transfer-config or --kv-offloading-size, not both");
  }
  if (!f.kv_transfer_config.empty()) {
    KV_ASSIGN_OR_RETURN(c.offload, offload::ParseKvTransferConfig(f.kv_transfer_config));
  } else if (!f.kv_offloading_size.empty()) {
    KV_ASSIGN_OR_RETURN(c.offload, offload::OffloadConfigFromSize(f.kv_offloading_size));
  }
  if (c.offload && !c.enable_prefix_caching) {
    return InvalidArgument(
        "KV offloading (--kv-transfer-config, --kv-offloading-size) needs "
        "prefix caching; drop --no-enable-prefix-caching");
  }
  return c;
}

}  // namespace kvserve::tools
