// The engine knobs, declared and parsed once for every command that runs or sizes an engine:
// `serve`, `bench throughput`, `generate` and `inspect` (and `bench offload`). vLLM's names;
// llama.cpp's short aliases (-t, -b) where `generate` has always had them.
//
//   --max-num-seqs S            --max-num-batched-tokens T (-b, --batch-size)
//   --max-model-len L           --block-size N
//   --kv-cache-memory-bytes B   --kv-cache-dtype D
//   --[no-]enable-prefix-caching  --threads N (-t)
//   --speculative-config JSON                            [engine flags]
//   --kv-transfer-config JSON   --kv-offloading-size GiB [offload flags]
//
// Every value is checked by ResolveEngineFlags, the same way for every command: a budget of
// 0 or garbage, a block size that is not a power of two, an unknown KV dtype... are the same
// InvalidArgument everywhere, before any model is opened.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace kvserve::tools {

struct EngineFlags {
  int max_num_seqs = engine::EngineConfig{}.max_num_seqs;
  int64_t max_num_batched_tokens = engine::EngineConfig{}.max_num_batched_tokens;
  int64_t max_model_len = 0;  // 0: not given (the model's context length)
  int block_size = engine::EngineConfig{}.block_size;
  std::string kv_cache_memory;  // empty: not given (the CPU default)
  std::string kv_cache_dtype = engine::EngineConfig{}.kv_cache_dtype;
  bool enable_prefix_caching = true;
  int threads = 0;                 // 0: not given (every core)
  std::string speculative_config;  // JSON (vLLM's --speculative-config)
  std::string kv_transfer_config;  // JSON (vLLM's OffloadingConnector shape)
  std::string kv_offloading_size;  // GiB of CPU tier
};

// Which flags a command takes.
enum class EngineFlagSet {
  kKvLayout,  // what shapes the KV cache: inspect (block size, dtype, budget, lengths)
  kEngine,    // kKvLayout + max-num-seqs, prefix caching, threads: bench, generate
  kServe,     // kEngine + the offload tiers: serve
};

// Registers the set's flags on `cmd`, bound to `flags` (which must outlive the parse).
void AddEngineFlags(CLI::App* cmd, EngineFlags& flags, EngineFlagSet set);

// The checked EngineConfig. InvalidArgument naming the flag for a bad value.
Result<engine::EngineConfig> ResolveEngineFlags(const EngineFlags& flags);

}  // namespace kvserve::tools
