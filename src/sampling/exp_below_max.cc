#include "sampling/exp_below_max.h"

#include <bit>
#include <cstring>

#include "sampling/clones.h"

namespace kvserve::sampling {
namespace {

// exp(x) for x in [-708, 0], branch-free so the loop vectorises: x = k ln2 + r with
// |r| <= ln2 / 2 (k by the round-to-integer magic number 1.5 * 2^52, whose low mantissa bits
// then hold k; ln2 split in a high part with trailing zeros so k * hi is exact), e^r by its
// Taylor series to r^12 (truncation error 0.35^13 / 13! < 2e-16), times 2^k built from k's
// bits. Below -708 (e^x < 3e-308) the result is 0.
inline double ExpNonPositive(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kMagic = 0x1.8p52;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  const bool underflow = x < -708.0;
  x = underflow ? -708.0 : x;
  const double t = x * kLog2e + kMagic;
  const double k = t - kMagic;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 479001600.0;  // 1 / 12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // k in [-1022, 0]: 2^k's exponent field is k + 1023, taken from t's low bits.
  const double scale = std::bit_cast<double>((std::bit_cast<uint64_t>(t) + 1023) << 52);
  return underflow ? 0.0 : p * scale;
}

}  // namespace

KVSERVE_SAMPLING_CLONES void ExpBelowMax(std::span<const float> logits, float max, double* out) {
  const double m = max;
  const float* in = logits.data();
  const size_t n = logits.size();
  for (size_t i = 0; i < n; ++i) out[i] = ExpNonPositive(static_cast<double>(in[i]) - m);
}

KVSERVE_SAMPLING_CLONES double SumExpBelowMax(std::span<const float> logits, float max,
                                              double* scratch) {
  ExpBelowMax(logits, max, scratch);
  const size_t n = logits.size();
  // Lane j of `sums` is partial sum j (GCC's vector extension: one register or several,
  // element-wise adds either way).
  typedef double Lanes8 __attribute__((vector_size(64)));
  Lanes8 sums = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Lanes8 e;
    std::memcpy(&e, scratch + i, sizeof(e));
    sums += e >= 0.0 ? e : Lanes8{};  // NaN adds nothing
  }
  double part[8];
  std::memcpy(part, &sums, sizeof(part));
  for (; i < n; ++i) part[i % 8] += scratch[i] >= 0.0 ? scratch[i] : 0.0;
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace kvserve::sampling
