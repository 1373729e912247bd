// exp(l - max) over a row of logits, vectorised: the sampler's fast path sums these to find
// where a draw falls (sampler_fast.cc). Not bit-identical to std::exp, and not the same bits on
// every SIMD target: callers may use the values only where an error bound is enough.
#pragma once

#include <cstdint>
#include <span>

namespace kvserve::sampling {

// Bound on |ExpBelowMax's value - exp(l - max)| / exp(l - max) for l - max >= -708; below
// that the value is 0 (an absolute error under 1e-307). The method's error is ~1e-15 (the
// test measures it); this bound leaves a factor of ~1000.
inline constexpr double kExpBelowMaxError = 0x1.0p-40;

// out[i] = exp((double)logits[i] - max) to within kExpBelowMaxError, for finite
// logits[i] <= max (max finite); any value for other logits. out holds logits.size() values.
void ExpBelowMax(std::span<const float> logits, float max, double* out);

// The sum of ExpBelowMax's values over the logits that are not NaN (-inf adds 0), for logits
// <= max (max finite): logit i goes into partial sum i % 8, each summed in order, and the 8
// are added pairwise at the end. The same value for the same logits on every call (on one SIMD
// target), within (n + 3) 2^-53 + kExpBelowMaxError of the exact sum, relative. `scratch`
// holds logits.size() values (ExpBelowMax's).
double SumExpBelowMax(std::span<const float> logits, float max, double* scratch);

}  // namespace kvserve::sampling
