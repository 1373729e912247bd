#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace kvserve {

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty()) return InvalidArgument("empty byte size");
  size_t num_end = 0;
  while (num_end < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[num_end])) || s[num_end] == '.')) {
    ++num_end;
  }
  if (num_end == 0) return InvalidArgument("byte size '" + s + "' does not start with a number");
  std::string number = s.substr(0, num_end);
  if (number.find('.') != number.rfind('.')) {
    return InvalidArgument("byte size '" + s + "' has more than one decimal point");
  }
  std::string unit;
  for (size_t i = num_end; i < s.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(s[i]))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    }
  }
  double multiplier = 0;
  if (unit.empty() || unit == "b") multiplier = 1;
  else if (unit == "k" || unit == "kib" || unit == "ki") multiplier = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mi") multiplier = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gi") multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "ti") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") multiplier = 1e3;
  else if (unit == "mb") multiplier = 1e6;
  else if (unit == "gb") multiplier = 1e9;
  else if (unit == "tb") multiplier = 1e12;
  else return InvalidArgument("byte size '" + s + "' has an unknown unit '" + unit +
                             "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  double value = std::strtod(number.c_str(), nullptr) * multiplier;
  if (!std::isfinite(value) || value >= 1.8e19) {
    return InvalidArgument("byte size '" + s + "' is too large");
  }
  return static_cast<uint64_t>(std::llround(value));
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < kKiB) return fmt::format("{} B", bytes);
  if (bytes < kMiB) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / kKiB);
  if (bytes < kGiB) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / kMiB);
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / kGiB);
}

}  // namespace kvserve
