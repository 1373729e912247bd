#include "engine/speculative.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvserve::engine {
namespace {

Result<int> SmallPositiveInt(const nlohmann::json& j, const char* key, int max) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max) {
    return InvalidArgument(
        fmt::format("--speculative-config: '{}' must be an integer in [1, {}]", key, max));
  }
  return static_cast<int>(v.get<int64_t>());
}

}  // namespace

Result<SpeculativeConfig> ParseSpeculativeConfig(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("--speculative-config must be a JSON object");
  }
  if (!j.contains("method") || !j["method"].is_string()) {
    return InvalidArgument("--speculative-config: 'method' (a string) is required");
  }
  const std::string method = j["method"].get<std::string>();
  std::vector<std::string> keys = {"method", "num_speculative_tokens"};
  if (method == "ngram") {
    keys.insert(keys.end(), {"prompt_lookup_max", "prompt_lookup_min"});
  } else if (method == "draft_model") {
    keys.push_back("model");
  } else {
    return InvalidArgument(fmt::format(
        "--speculative-config: method '{}' is not supported (ngram, draft_model)", method));
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return InvalidArgument(
          fmt::format("--speculative-config: unknown key '{}' for method {}", key, method));
    }
  }
  SpeculativeConfig c;
  if (!j.contains("num_speculative_tokens")) {
    return InvalidArgument("--speculative-config: 'num_speculative_tokens' is required");
  }
  KV_ASSIGN_OR_RETURN(c.num_speculative_tokens, SmallPositiveInt(j, "num_speculative_tokens", 64));
  if (method == "draft_model") {
    if (!j.contains("model") || !j["model"].is_string() || j["model"].get<std::string>().empty()) {
      return InvalidArgument("--speculative-config: 'model' (the draft model's file) is required");
    }
    c.draft_model = j["model"].get<std::string>();
    return c;
  }
  // vLLM: with neither bound given both are 5; with one given, the other defaults to it
  // (min = max) -- a fixed n-gram length.
  const bool has_max = j.contains("prompt_lookup_max"), has_min = j.contains("prompt_lookup_min");
  if (has_max) {
    KV_ASSIGN_OR_RETURN(c.prompt_lookup_max, SmallPositiveInt(j, "prompt_lookup_max", 64));
  }
  if (has_min) {
    KV_ASSIGN_OR_RETURN(c.prompt_lookup_min, SmallPositiveInt(j, "prompt_lookup_min", 64));
  }
  if (!has_max && !has_min) c.prompt_lookup_max = c.prompt_lookup_min = 5;
  if (!has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (!has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return InvalidArgument("--speculative-config: prompt_lookup_min must be <= prompt_lookup_max");
  }
  return c;
}

std::vector<int32_t> ProposeNgramDrafts(std::span<const int32_t> tokens, int max_drafts, int min_n,
                                        int max_n) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = tokens.last(static_cast<size_t>(n));
    // Earlier occurrences, latest first: the first followed by max_drafts tokens wins; failing
    // that, the one followed by the most (in periodic text the latest is followed by one period
    // only).
    int64_t best_from = -1;
    for (int64_t s = size - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + s)) continue;
      best_from = s + n;
      if (size - best_from >= max_drafts) break;
    }
    if (best_from < 0) continue;
    const int64_t count = std::min<int64_t>(max_drafts, size - best_from);
    return std::vector<int32_t>(tokens.begin() + best_from, tokens.begin() + best_from + count);
  }
  return {};
}

bool DraftBackoff::ShouldDraft() {
  if (skip_steps_ == 0) return true;
  --skip_steps_;
  return false;
}

void DraftBackoff::Record(int64_t num_drafts, int64_t num_accepted) {
  if (num_drafts == 0) return;
  if (num_accepted > 0) {
    backoff_ = 0;
    return;
  }
  backoff_ = std::min(kMaxBackoffSteps, backoff_ == 0 ? 1 : 2 * backoff_);
  skip_steps_ = backoff_;
}

}  // namespace kvserve::engine
