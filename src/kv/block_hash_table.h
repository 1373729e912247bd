// BlockHashTable: prefix hash -> block id for one pool's cached blocks (BlockPool's index).
//
// Open addressing with linear probing and backward-shift deletion, in a table sized once from
// the pool's block count (the next power of two >= 2 x capacity, so at most half full): it never
// rehashes and never allocates after construction, and a lookup, insert or erase touches one or
// two cache lines. (std::unordered_map allocated a node per cached block and freed it on
// eviction: about half of a busy scheduler's time in BlockPool, measured by `kvserve simulate`,
// docs/simulator.md.)
// The slot of a hash is hash.low & mask (xxh3's low bits are uniform).
// Backward-shift deletion, worked example (mask 7): A and B both home at 2, C homes at 3:
//   slots 2:A 3:B 4:C. Erase A: B (home 2) moves into 2; then C (home 3, now at 4) moves into 3;
//   slot 4 is empty: done. No tombstones, so probe lengths never grow with churn.
// Thread safety: none (the pool's owner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kv/hash.h"

namespace kvserve::kv {

class BlockHashTable {
 public:
  // Room for `capacity` entries.
  explicit BlockHashTable(size_t capacity);

  std::optional<int32_t> Find(const BlockHash& hash) const;
  // Adds hash -> block; false (nothing changed) when the hash is already present.
  // note: size() < capacity (CHECKed).
  bool Insert(const BlockHash& hash, int32_t block);
  // Removes the hash; false when absent.
  bool Erase(const BlockHash& hash);
  size_t size() const { return size_; }

 private:
  struct Slot {
    BlockHash hash;
    int32_t block = 0;
    bool used = false;
  };
  size_t Home(const BlockHash& hash) const { return static_cast<size_t>(hash.low) & mask_; }
  // The slot holding `hash`, or the empty slot where it would go.
  size_t Probe(const BlockHash& hash) const;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

}  // namespace kvserve::kv
