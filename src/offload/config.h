// OffloadConfig: the tiers a server runs with, parsed from the flags users already write for
// vLLM:
//   --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
//     "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
//       "cpu_bytes_to_use": 8589934592, "blocks_per_chunk": 1, "eviction_policy": "lru",
//       "secondary_tiers": [{"type": "fs", "root_dir": "/var/cache/kvserve",
//                            "n_read_threads": 8, "n_write_threads": 8},
//                           {"type": "redis", "url": "redis://127.0.0.1:6379"}]}}'
//   --kv-offloading-size 8        (GiB of CPU tier, nothing else)
// Unknown keys, wrong types and out-of-range values are InvalidArgument naming the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "offload/redis_tier.h"

namespace kvserve::offload {

struct FileTierConfig {
  std::string root_dir;
  int n_read_threads = 4;
  int n_write_threads = 4;
};

struct RedisTierConfig {
  std::string url;
  RedisAddress address;
};

struct OffloadConfig {
  std::string spec_name = "CPUOffloadingSpec";  // or "TieringOffloadingSpec"
  uint64_t cpu_bytes_to_use = 0;
  int blocks_per_chunk = 1;
  std::string eviction_policy = "lru";
  std::optional<FileTierConfig> file;
  std::optional<RedisTierConfig> redis;

  // Threads for loads and stores (the file tier's counts, else 2 each).
  int num_read_threads() const { return file ? file->n_read_threads : 2; }
  int num_write_threads() const { return file ? file->n_write_threads : 2; }
  // "cpu 8.00 GiB -> fs /var/cache/kvserve (8 read / 8 write threads) -> redis 127.0.0.1:6379"
  std::string Describe() const;
};

// Parses --kv-transfer-config. cpu_bytes_to_use is a number of bytes or a size string
// ("8GiB"); root_dir and url are required for their tier types; at most one tier of each
// type; secondary tiers need spec_name TieringOffloadingSpec; blocks_per_chunk must be 1
// (larger chunks are not implemented).
Result<OffloadConfig> ParseKvTransferConfig(std::string_view json_text);

// --kv-offloading-size GIB (a positive number of GiB, fractions allowed): a CPU tier alone.
Result<OffloadConfig> OffloadConfigFromSize(std::string_view gib);

}  // namespace kvserve::offload
