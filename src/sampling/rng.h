// Counter-based randomness: a request's draw for the token at `position` is a pure function
// of (seed, position). No state is carried between draws, so the stream cannot depend on other
// requests, on batching, on preemption and recompute, or on the order of calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvserve::sampling {

// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
uint64_t Mix64(uint64_t x);

// 64 random bits for (seed, position): two Mix64 rounds over the pair.
uint64_t RandomBits(uint64_t seed, int64_t position);

// Uniform in [0, 1) with 53 random bits: RandomBits(seed, position) >> 11, times 2^-53.
double UniformDouble(uint64_t seed, int64_t position);

// The request's seed: `seed` when given, else a hash (FNV-1a 64, then Mix64) of request_id,
// so unseeded requests are still reproducible for a given id.
uint64_t ResolveSeed(std::optional<uint64_t> seed, std::string_view request_id);

}  // namespace kvserve::sampling
