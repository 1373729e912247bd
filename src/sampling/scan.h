// Scans of a vocabulary's logits that the sampler runs once per sampled token, with AVX-512
// where the CPU has it (16 floats at a time) and plain loops otherwise; both give the same
// result for every input, NaN and infinities included.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::sampling {

// Index of the largest logit, ties to the lowest id (-0 and +0 are equal); NaN never wins;
// 0 when every logit is -inf or NaN.
int32_t Argmax(std::span<const float> logits);

// The largest finite logit; -inf when there is none (all NaN or infinite).
float MaxFinite(std::span<const float> logits);

// Appends to `out`, ascending, every i with first <= ids[i] <= last (32 ids at a time where the
// CPU allows). note: first <= last.
void IndicesInRange(std::span<const uint16_t> ids, uint16_t first, uint16_t last,
                    std::vector<int32_t>& out);

// out[i] = in[i] / divisor (each quotient correctly rounded, whatever the vector width; out
// may be in), and into `maxima` (cleared first) the largest finite out of disjoint groups of
// them: about n / 64 groups (16 strided lanes per 1,024 values with AVX-512, runs of 64
// otherwise), -inf for a group with none. One pass: the sampler's scaling of the logits.
void DivideAndGroupMaxima(std::span<const float> in, float divisor, float* out,
                          std::vector<float>& maxima);

// DivideAndGroupMaxima's group maxima of `values` themselves.
void GroupMaxima(std::span<const float> values, std::vector<float>& maxima);

// The largest value that is not NaN (+inf included); -inf when there is none.
float MaxNotNaN(std::span<const float> values);

// A lower bound on the k-th largest finite value (k >= 1) of the values whose group maxima
// these are: the k-th largest group maximum (at least k values are at or above it, so every
// one of the k largest is); -inf when fewer than k groups hold a finite value. Reorders
// `maxima`.
float KthLargestOf(std::vector<float>& maxima, int32_t k);

// Appends to `out`, ascending, every i whose logit is finite and >= floor (16 at a time where
// the CPU allows).
void IndicesAtLeast(std::span<const float> logits, float floor, std::vector<int32_t>& out);

}  // namespace kvserve::sampling
