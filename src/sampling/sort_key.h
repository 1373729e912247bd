// The sampler's fixed candidate order ("MoreLikely"): logit descending, ties by token id
// ascending, as the ascending order of 64-bit sort words. Internal to src/sampling.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace kvserve::sampling {

// Sort key of a finite logit: ascending key = descending logit. -0 and +0 get the same key
// (equal logits). Example: 2.0f -> ~(0x40000000 | 0x80000000).
inline uint32_t DescendingKey(float logit) {
  uint32_t u;
  std::memcpy(&u, &logit, 4);
  u = (u & 0x7FFFFFFFu) == 0 ? 0 : u;  // -0 -> +0
  // Negative: flip every bit; positive: set the sign bit. Branch-free (signs are random).
  const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u;
  return ~(u ^ flip);
}

// (DescendingKey(logit) << 32 | token): sorting these words ascending is MoreLikely's order.
inline uint64_t SortWord(float logit, int32_t token) {
  return (static_cast<uint64_t>(DescendingKey(logit)) << 32) | static_cast<uint32_t>(token);
}

inline int32_t TokenOf(uint64_t sort_word) {
  return static_cast<int32_t>(sort_word & 0xFFFFFFFFu);
}

// Sorts sort words ascending. note: `words` is in increasing token order (then a stable radix
// sort on the key bits alone is exact). `buffer` is scratch.
void SortWords(std::vector<uint64_t>& words, std::vector<uint64_t>& buffer);

}  // namespace kvserve::sampling
