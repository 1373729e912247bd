// Choice: one generated sequence of a request, from the engine's token stream to text.
// Each engine output goes token -> StreamDecoder (whole UTF-8 characters) -> StopMatcher
// (stop strings held back, truncated) -> ReasoningParser or HarmonyParser (optional; the
// harmony one reads special tokens, so the decoder renders them for it) -> a ChoiceDelta.
// A completed stop string aborts the engine request (freeing its blocks) and finishes the
// choice with "stop".
//
// Owns its RequestHandle; destroying an unfinished Choice aborts its request, so a client
// that goes away never leaves work behind.
// Thread safety: none; one HTTP handler thread drives it (the engine side is thread-safe).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/harmony_parser.h"
#include "server/reasoning_parser.h"
#include "server/stop_matcher.h"
#include "tokenizer/stream_decoder.h"

namespace kvserve::server {

struct ChoiceDelta {
  std::string text;                         // content
  std::string reasoning;                    // reasoning_content (reasoning parser only)
  std::vector<engine::TokenOutput> tokens;  // the tokens this delta consumed (logprobs)
  std::optional<engine::FinishReason> finish_reason;
  std::string error;  // with "error"
};

class Choice {
 public:
  Choice(const tokenizer::Tokenizer& tokenizer, engine::AsyncEngine& engine,
         engine::RequestHandle handle, std::vector<std::string> stop, ReasoningFormat reasoning);
  ~Choice();
  Choice(const Choice&) = delete;
  Choice& operator=(const Choice&) = delete;

  // The next delta: blocks for an engine output when `block`, else returns nullopt when none
  // is ready. nullopt too once finished.
  std::optional<ChoiceDelta> Next(bool block);
  // Ends the request now (client gone); later Next() returns nullopt.
  void Abort();
  // Event-driven readers: `wake` runs (on the engine's thread) after each new engine output;
  // outputs that came before are read by the next Next(false) all the same.
  void Listen(std::function<void()> wake) { handle_.stream->SetListener(std::move(wake)); }

  bool finished() const { return finished_; }
  int64_t num_generated() const { return num_generated_; }
  // Prompt tokens the engine served from a cache tier (prefix cache or offload tiers).
  int64_t num_cached_tokens() const { return num_cached_tokens_; }

 private:
  void AddText(std::string_view text, ChoiceDelta& delta);
  void Finish(engine::FinishReason reason, ChoiceDelta& delta);

  engine::AsyncEngine& engine_;
  engine::RequestHandle handle_;
  tokenizer::StreamDecoder decoder_;
  StopMatcher stop_;
  std::optional<ReasoningParser> reasoning_;
  std::optional<HarmonyParser> harmony_;
  bool finished_ = false;
  int64_t num_generated_ = 0;
  int64_t num_cached_tokens_ = 0;
};

}  // namespace kvserve::server
