#include "sampling/sort_key.h"

#include <algorithm>
#include <array>

namespace kvserve::sampling {
namespace {

// An LSD radix sort on the 32 key bits of the words: 11 + 11 + 10 bits per pass; a pass whose
// digit is the same for every word is skipped. Exact because the passes are stable and the
// words arrive in token order (ties on the key stay in token order).
constexpr int kDigitShift[3] = {32, 43, 54};
constexpr uint32_t kDigitMask[3] = {0x7FF, 0x7FF, 0x3FF};

void RadixSortWords(std::vector<uint64_t>& words, std::vector<uint64_t>& buffer) {
  std::array<std::array<uint32_t, 2049>, 3> count{};
  for (uint64_t w : words) {
    for (int p = 0; p < 3; ++p) ++count[p][((w >> kDigitShift[p]) & kDigitMask[p]) + 1];
  }
  const size_t n = words.size();
  buffer.resize(n);
  for (int p = 0; p < 3; ++p) {
    const uint32_t mask = kDigitMask[p];
    if (count[p][((words[0] >> kDigitShift[p]) & mask) + 1] == n) continue;  // one digit
    for (uint32_t b = 0; b < mask + 1; ++b) count[p][b + 1] += count[p][b];
    for (uint64_t w : words) buffer[count[p][(w >> kDigitShift[p]) & mask]++] = w;
    words.swap(buffer);
  }
}

}  // namespace

void SortWords(std::vector<uint64_t>& words, std::vector<uint64_t>& buffer) {
  if (words.size() < 512) {
    std::sort(words.begin(), words.end());
  } else {
    RadixSortWords(words, buffer);
  }
}

}  // namespace kvserve::sampling
