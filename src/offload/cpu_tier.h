// CpuTier: block pages in process memory, bounded in bytes, least recently used out first.
//
// Owns: the payloads (shared, immutable once stored) and an LRU list over them.
// Invariants: usage_bytes() <= capacity_bytes(); each key appears once in the list and the map.
// A Put that would exceed the bound evicts least recently used blocks first and hands each to
// the eviction sink (the cascade to the next tier), outside the lock. A block larger than the
// whole bound is not stored (counted as an eviction and handed to the sink).
// Thread safety: all methods are thread-safe (one mutex); the sink runs on the caller's thread.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "offload/tier.h"

namespace kvserve::offload {

using SharedBytes = std::shared_ptr<const Bytes>;
using EvictionSink = std::function<void(const BlockKey& key, SharedBytes bytes)>;

class CpuTier final : public Tier {
 public:
  explicit CpuTier(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  TierKind kind() const override { return TierKind::kCpu; }
  Status Put(const BlockKey& key, std::span<const std::byte> bytes) override;
  Result<std::optional<Bytes>> Get(const BlockKey& key) override;
  // Copies the stored payload into `payload` outside the lock (the payload is immutable).
  Result<bool> GetInto(const BlockKey& key, std::span<std::byte> payload) override;
  bool Contains(const BlockKey& key) override;

  // Put without a copy. Always ok.
  void PutShared(const BlockKey& key, SharedBytes bytes);
  // The stored payload (no copy), or null on a miss. Counts a lookup and a hit/load.
  SharedBytes GetShared(const BlockKey& key);

  // Set before the first Put. The sink must not call back into this tier's Put.
  void SetEvictionSink(EvictionSink sink) { sink_ = std::move(sink); }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t usage_bytes() const;
  size_t num_blocks() const;

 private:
  struct Entry {
    BlockKey key;
    SharedBytes bytes;
  };
  using List = std::list<Entry>;  // front = most recently used

  const uint64_t capacity_bytes_;
  EvictionSink sink_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<BlockKey, List::iterator, BlockKeyHasher> map_;
  uint64_t usage_bytes_ = 0;
};

}  // namespace kvserve::offload
