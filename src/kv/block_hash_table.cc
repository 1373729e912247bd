#include "kv/block_hash_table.h"

#include <bit>

#include "core/check.h"

namespace kvserve::kv {

BlockHashTable::BlockHashTable(size_t capacity)
    : slots_(std::bit_ceil(std::max<size_t>(2 * capacity, 2))),
      mask_(slots_.size() - 1),
      capacity_(capacity) {}

size_t BlockHashTable::Probe(const BlockHash& hash) const {
  size_t i = Home(hash);
  while (slots_[i].used && !(slots_[i].hash == hash)) i = (i + 1) & mask_;
  return i;
}

std::optional<int32_t> BlockHashTable::Find(const BlockHash& hash) const {
  const Slot& s = slots_[Probe(hash)];
  if (!s.used) return std::nullopt;
  return s.block;
}

bool BlockHashTable::Insert(const BlockHash& hash, int32_t block) {
  const size_t i = Probe(hash);
  if (slots_[i].used) return false;
  CHECK_LT(size_, capacity_) << "block hash table full";
  slots_[i] = {hash, block, true};
  ++size_;
  return true;
}

bool BlockHashTable::Erase(const BlockHash& hash) {
  size_t hole = Probe(hash);
  if (!slots_[hole].used) return false;
  // Shift later members of the probe run back over the hole, unless that would move one
  // before its home slot (cyclically: its home lies in (hole, j]).
  for (size_t j = (hole + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
    const size_t home = Home(slots_[j].hash);
    const bool home_in_gap = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (home_in_gap) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole].used = false;
  --size_;
  return true;
}

}  // namespace kvserve::kv
