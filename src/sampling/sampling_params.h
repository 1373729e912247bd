// SamplingParams: how one request picks its tokens (vLLM semantics), and when it stops.
//
// Order of operations (vLLM): penalties on the raw logits -> temperature -> min-p, top-k,
// top-p -> draw. Logprobs reported to users are those of the raw model distribution
// (log_softmax of the logits before penalties and temperature), as vLLM's default.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"

namespace kvserve::sampling {

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;
// Most top logprobs a request may ask for (vLLM's default max_logprobs, OpenAI's limit).
inline constexpr int32_t kMaxLogprobs = 20;

struct SamplingParams {
  // 0 = greedy (argmax after penalties, ties to the lowest token id); otherwise logits /= T.
  float temperature = 1.0f;
  // Keep the smallest set of most likely tokens whose probability reaches top_p. 1 = off.
  float top_p = 1.0f;
  // Keep the k most likely tokens. 0 or -1 = off.
  int32_t top_k = 0;
  // Drop tokens whose probability is below min_p x the most likely token's. 0 = off.
  float min_p = 0.0f;
  // OpenAI: logit -= presence_penalty for each token generated at least once (prompt excluded).
  float presence_penalty = 0.0f;
  // OpenAI: logit -= frequency_penalty x (times the token was generated).
  float frequency_penalty = 0.0f;
  // CTRL / vLLM, over prompt and generated tokens: positive logit /= p, otherwise logit *= p.
  // 1 = off.
  float repetition_penalty = 1.0f;
  // Seed of the request's random stream; nullopt = derived from the request id (ResolveSeed).
  std::optional<uint64_t> seed;
  // Generating any of these ends the request (finish reason "stop").
  std::vector<int32_t> stop_token_ids;
  // When true, the model's EOS token does not end the request.
  bool ignore_eos = false;
  // Most tokens to generate; nullopt = until the context is full.
  std::optional<int32_t> max_tokens;
  // nullopt = no logprobs; K = the sampled token's logprob plus the K most likely tokens'.
  std::optional<int32_t> logprobs;

  // Range checks; InvalidArgument naming the field and the allowed range.
  [[nodiscard]] Status Validate() const;
  bool IsGreedy() const { return temperature < kGreedyTemperature; }
  bool HasPenalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// Whether `token` ends the request as a stop: EOS (unless ignore_eos) or one of
// stop_token_ids. (Lengths, max_tokens and max-model-len, are the scheduler's to end.)
bool IsStopToken(const SamplingParams& params, int32_t token, std::optional<int32_t> eos_token_id);

}  // namespace kvserve::sampling
