// StringIndex: an open-addressing hash index from strings to their position in a vector of
// strings it does not own (the vocab's token texts, or its merges). One allocation, no
// per-entry nodes: building a 150K-entry index is a few milliseconds.
//
// Layout: `slots_` has a power-of-two size >= 2x the entries; each slot holds an index into
// the strings (or kEmpty). Lookup hashes the key, then probes linearly until it finds a slot
// whose string equals the key, or an empty slot. Example: 3 strings -> 8 slots; a key whose
// hash & 7 == 5 checks slots 5, 6, 7, 0, ... in turn.
//
// Thread safety: immutable after Build; concurrent lookups are safe. The indexed strings must
// outlive the index and not change.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::tokenizer {

class StringIndex {
 public:
  // Indexes strings[0..n). For duplicate strings the first position wins; returns the
  // positions of the later duplicates (empty when all are distinct).
  std::vector<int32_t> Build(const std::vector<std::string>& strings) {
    strings_ = &strings;
    size_t num_slots = 16;
    while (num_slots < 2 * strings.size()) num_slots *= 2;
    slots_.assign(num_slots, kEmpty);
    mask_ = num_slots - 1;
    std::vector<int32_t> duplicates;
    for (size_t i = 0; i < strings.size(); ++i) {
      size_t slot = Hash(strings[i]) & mask_;
      bool duplicate = false;
      while (slots_[slot] != kEmpty) {
        if (strings[slots_[slot]] == strings[i]) {
          duplicate = true;
          break;
        }
        slot = (slot + 1) & mask_;
      }
      if (duplicate) {
        duplicates.push_back(static_cast<int32_t>(i));
      } else {
        slots_[slot] = static_cast<int32_t>(i);
      }
    }
    return duplicates;
  }

  std::optional<int32_t> Find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    for (size_t slot = Hash(key) & mask_;; slot = (slot + 1) & mask_) {
      const int32_t i = slots_[slot];
      if (i == kEmpty) return std::nullopt;
      if ((*strings_)[i] == key) return i;
    }
  }

 private:
  static constexpr int32_t kEmpty = -1;
  static size_t Hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  const std::vector<std::string>* strings_ = nullptr;
  std::vector<int32_t> slots_;  // (power of two) index into *strings_, or kEmpty
  size_t mask_ = 0;
};

}  // namespace kvserve::tokenizer
