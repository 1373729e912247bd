// Speculative decoding that changes nothing but the speed.
//
// kvserve's sampler draws each token from (seed, position) and the logits of a position depend
// only on the tokens before it (model/model.h), so a draft can be checked exactly: the engine
// verifies k drafted tokens d1..dk of a request in one forward pass over [last token, d1..dk]
// (1 + k logit rows), samples row 0 as it always would, and accepts d1 when it equals that
// token; then samples row 1 (whose logits are those the request would have had with d1), and so
// on; the first token that differs from its draft is still the right token, and ends the run.
// Every emitted token is therefore the token decoding without speculation gives, greedy or
// sampled, alone or batched: speculation changes the speed, never the output.
//
// Drafts come from a proposer:
//   ngram (vLLM's prompt lookup): the longest suffix of the request's tokens (between
//     prompt_lookup_min and prompt_lookup_max tokens) that occurred earlier in its prompt or
//     output; the tokens that followed its latest earlier occurrence with k tokens after it
//     (else the earliest) are the drafts.
//   draft_model: a small model with the same vocabulary drafts greedily (engine/draft_model.h);
//     its KV lives in its own groups of the same pool and accounting.
// Adaptive: a request whose drafts were all rejected skips drafting for 1, 2, 4, ... steps
// (at most kMaxBackoffSteps), so a workload where drafts never match pays (almost) nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvserve::engine {

// --speculative-config JSON (vLLM's keys).
struct SpeculativeConfig {
  int num_speculative_tokens = 0;  // k: most drafts per step
  int prompt_lookup_max = 0;       // ngram: longest n-gram matched
  int prompt_lookup_min = 0;       // ngram: shortest n-gram matched
  std::string draft_model;         // draft_model: its GGUF file; empty for ngram
};

// Parses `{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": N,
// "prompt_lookup_min": M}` (K in [1, 64]; N and M in [1, 64] with M <= N; vLLM's defaults: none
// given -> both 5, one given -> the other equals it) or `{"method": "draft_model", "model":
// "FILE.gguf", "num_speculative_tokens": K}`. InvalidArgument naming the key for an unknown
// method, an unknown key or a bad value.
Result<SpeculativeConfig> ParseSpeculativeConfig(std::string_view json);

// The drafts the ngram proposer gives for `tokens` (prompt + output so far): at most
// max_drafts tokens, possibly none.
// Example (min 2, max 3): tokens a b c d a b c -> the suffix "a b c" occurred at 0, followed by
// "d a b c": drafts d a b (max_drafts 3). Periodic text x x x x x (min 1, max 3, max_drafts 2):
// "x x x" occurred at 1 (followed by one x) and at 0 (by two): drafts x x.
std::vector<int32_t> ProposeNgramDrafts(std::span<const int32_t> tokens, int max_drafts, int min_n,
                                        int max_n);

// Per-request adaptive state: when to draft, and the acceptance statistics.
class DraftBackoff {
 public:
  static constexpr int kMaxBackoffSteps = 32;

  // Whether the request should draft this step (counts down a back-off).
  bool ShouldDraft();
  // After a verification of `num_drafts` drafts of which `num_accepted` were accepted.
  void Record(int64_t num_drafts, int64_t num_accepted);

 private:
  int skip_steps_ = 0;  // steps left to skip
  int backoff_ = 0;     // current back-off length (0: none)
};

}  // namespace kvserve::engine
