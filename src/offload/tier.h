// The Tier interface: a store of KV block pages keyed by (content hash, KV group).
//
// A key names the bytes of one block of one KV group (every writer layer's page of that
// block, exactly as laid out in the group's arena, kv/arena.h). The hash is the chained prefix
// hash (kv/hash.h), already namespaced by the model fingerprint, so the same key means the
// same bytes in every process and every tier. Per-group keys (not one record for all groups)
// follow the device cache, which caches and evicts each group's blocks independently.
//
// Contract: Get never returns bytes that failed their checks; a failure of the medium (full
// disk, read-only directory, dead Redis) is counted in the tier's counters and reported as a
// Status or a miss, never a crash. Thread safety: every method of every tier is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/hash.h"
#include "offload/metrics.h"

namespace kvserve::offload {

struct BlockKey {
  kv::BlockHash hash;
  int group = 0;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  // "<32 hex digits>-g<group>", used in file names and Redis keys.
  std::string ToString() const;
};

struct BlockKeyHasher {
  size_t operator()(const BlockKey& k) const {
    return static_cast<size_t>(k.hash.low ^ (k.hash.high * 0x9E3779B97F4A7C15ull) ^
                               static_cast<uint64_t>(k.group));
  }
};

using Bytes = std::vector<std::byte>;

enum class TierKind { kCpu = 0, kFile = 1, kRedis = 2 };
const char* TierName(TierKind kind);  // "cpu", "file", "redis"

class Tier {
 public:
  virtual ~Tier() = default;
  virtual TierKind kind() const = 0;

  // Stores a copy of `bytes` under `key` (a key already held is left as is: same key, same
  // bytes). Errors are counted and returned; the caller serves around them.
  virtual Status Put(const BlockKey& key, std::span<const std::byte> bytes) = 0;
  // The bytes under `key`, nullopt on a miss (including a record that failed its checks,
  // which is deleted). A non-ok Status only for a medium failure (also counted).
  virtual Result<std::optional<Bytes>> Get(const BlockKey& key) = 0;
  // Get into the caller's buffer of exactly the block's size: true on a hit (the checked
  // bytes are in `payload`), false on a miss (`payload` then holds unspecified bytes). The
  // default copies Get's bytes; tiers that can read in place override it.
  virtual Result<bool> GetInto(const BlockKey& key, std::span<std::byte> payload);
  // Whether Get would probably hit (a later Get may still miss: eviction, corruption).
  virtual bool Contains(const BlockKey& key) = 0;

  const TierCounters& counters() const { return counters_; }
  TierStats Stats() const { return ReadCounters(TierName(kind()), counters_); }

 protected:
  TierCounters counters_;
};

}  // namespace kvserve::offload
