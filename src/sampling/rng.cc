#include "sampling/rng.h"

namespace kvserve::sampling {
namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// Separates the position stream from the seed before mixing, so (seed, position) and
// (position, seed) do not collide.
constexpr uint64_t kPositionDomain = 0xd1b54a32d192ed03ULL;
}  // namespace

uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t RandomBits(uint64_t seed, int64_t position) {
  const uint64_t p = Mix64(static_cast<uint64_t>(position) * kPositionDomain + kGolden);
  return Mix64((seed + kGolden) ^ p);
}

double UniformDouble(uint64_t seed, int64_t position) {
  return static_cast<double>(RandomBits(seed, position) >> 11) * 0x1.0p-53;
}

uint64_t ResolveSeed(std::optional<uint64_t> seed, std::string_view request_id) {
  if (seed.has_value()) return *seed;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (char c : request_id) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return Mix64(h);
}

}  // namespace kvserve::sampling
