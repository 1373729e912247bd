// Scans of a vocabulary's logits that the sampler runs once per sampled token, with AVX-512
// where the CPU has it (16 floats at a time) and plain loops otherwise; both give the same
// result for every input, NaN and infinities included.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <span>

namespace kvserve::sampling {

// Index of the largest logit, ties to the lowest id (-0 and +0 are equal); NaN never wins;
// 0 when every logit is -inf or NaN.
int32_t Argmax(std::span<const float> logits);

// The largest finite logit; -inf when there is none (all NaN or infinite).
float MaxFinite(std::span<const float> logits);

}  // namespace kvserve::sampling
