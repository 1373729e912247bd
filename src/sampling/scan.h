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

}  // namespace kvserve::sampling
