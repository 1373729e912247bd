#include "sampling/sampling_params.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kvserve::sampling {

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgument(fmt::format("temperature must be >= 0, got {}", temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return InvalidArgument(fmt::format("top_p must be in (0, 1], got {}", top_p));
  }
  if (top_k < -1) {
    return InvalidArgument(fmt::format("top_k must be -1 (off), 0 (off) or positive, got {}", top_k));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return InvalidArgument(fmt::format("min_p must be in [0, 1], got {}", min_p));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return InvalidArgument(
        fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return InvalidArgument(
        fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return InvalidArgument(
        fmt::format("repetition_penalty must be > 0, got {}", repetition_penalty));
  }
  if (max_tokens.has_value() && *max_tokens < 1) {
    return InvalidArgument(fmt::format("max_tokens must be >= 1, got {}", *max_tokens));
  }
  if (logprobs.has_value() && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return InvalidArgument(
        fmt::format("logprobs must be in [0, {}], got {}", kMaxLogprobs, *logprobs));
  }
  auto negative = std::find_if(stop_token_ids.begin(), stop_token_ids.end(),
                               [](int32_t id) { return id < 0; });
  if (negative != stop_token_ids.end()) {
    return InvalidArgument(fmt::format("stop_token_ids must be >= 0, got {}", *negative));
  }
  return Status::Ok();
}

bool IsStopToken(const SamplingParams& params, int32_t token, std::optional<int32_t> eos_token_id) {
  if (!params.ignore_eos && eos_token_id.has_value() && token == *eos_token_id) return true;
  return std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
         params.stop_token_ids.end();
}

}  // namespace kvserve::sampling
