// Request: the scheduler's view of one request (tokens, progress, limits). No sampling, no
// model: the engine keeps those beside it.
//
// vLLM v1 bookkeeping: one token list (prompt then generated) and num_computed_tokens, the
// prefix of that list whose KV is in the cache. There are no separate prefill and decode
// phases: each step computes some of tokens[num_computed_tokens, NumTokens()); when that
// reaches NumTokens() the last position's logits are sampled and the new token is appended.
// Worked example: prompt of 10 tokens, budget 4: steps compute [0,4), [4,8), [8,10) (sampled:
// token 10 appended), [10,11) (sampled), ...
// Preemption frees the KV and sets num_computed_tokens = 0; readmission looks the whole token
// list up in the prefix cache and recomputes the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/group_manager.h"
#include "kv/hash.h"
#include "kv/kv_connector.h"

namespace kvserve::scheduler {

using RequestId = kv::RequestId;
using TokenId = kv::TokenId;

enum class FinishReason {
  kStop,    // a stop or EOS token
  kLength,  // max_tokens, or max-model-len reached
  kAbort,   // the client went away
  kError,   // the request cannot run (e.g. it alone needs more KV than the cache holds)
};

// "stop", "length", "abort", "error" (OpenAI's finish_reason spelling where one exists).
const char* FinishReasonName(FinishReason reason);

// What a caller hands the scheduler.
struct NewRequest {
  RequestId id = 0;
  std::vector<TokenId> prompt;        // at least one token
  std::optional<int64_t> max_tokens;  // nullopt: until max-model-len
  std::string cache_salt;             // isolates prefix-cache entries (empty: shared)
};

struct Request {
  RequestId id = 0;
  std::vector<TokenId> tokens;        // prompt, then every generated token
  int64_t num_prompt_tokens = 0;
  int64_t max_tokens = 0;             // resolved: prompt + max_tokens <= max-model-len
  int64_t num_computed_tokens = 0;    // tokens[0, this) have KV in the cache
  int64_t num_cached_tokens = 0;      // prefix-cache hit at the latest admission (all tiers)
  int64_t num_loaded_tokens = 0;      // of which loaded from a tier below the device pool
  std::vector<int64_t> loaded_tokens_per_tier;  // of which from each tier (connector's order)
  bool use_lower_tiers = true;        // false after a load came up short (no retry loop)
  std::vector<kv::BlockLoad> pending_loads;  // while its blocks load from a lower tier
  int64_t num_preemptions = 0;
  int64_t arrival_index = 0;          // FIFO order of AddRequest
  // Speculative decoding: tokens proposed to follow tokens.back() (Scheduler::SetDraftTokens),
  // verified in the next step and then dropped; and the step's contiguous input
  // [tokens.back(), drafts...] while they are verified.
  std::vector<TokenId> draft_tokens;
  std::vector<TokenId> verify_tokens;
  std::string cache_salt;

  int64_t NumTokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t NumOutputTokens() const { return NumTokens() - num_prompt_tokens; }
  std::span<const TokenId> Prompt() const {
    return std::span<const TokenId>(tokens).first(num_prompt_tokens);
  }
  std::span<const TokenId> Output() const {
    return std::span<const TokenId>(tokens).subspan(num_prompt_tokens);
  }
  // Only the latest sampled token is left to compute (otherwise it is computing its prompt,
  // or recomputing after a preemption).
  bool IsDecoding() const {
    return NumOutputTokens() > 0 && num_computed_tokens + 1 == NumTokens();
  }
};

}  // namespace kvserve::scheduler
