// Byte sizes as people write them: "4GiB", "512MiB", "8GB", "1.5G", "1048576".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvserve {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Parses a byte size. Binary units (KiB, MiB, GiB, TiB, and the short K, M, G, T) are powers
// of 1024; decimal units (KB, MB, GB, TB) are powers of 1000; a bare number is bytes. Case of
// the unit letters is ignored, "B" is optional, fractions are allowed ("1.5GiB").
Result<uint64_t> ParseBytes(std::string_view text);

// 3.5 GiB -> "3.50 GiB"; below 1 KiB -> "123 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace kvserve
