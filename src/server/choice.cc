#include "server/choice.h"

namespace kvserve::server {

Choice::Choice(const tokenizer::Tokenizer& tokenizer, engine::AsyncEngine& engine,
               engine::RequestHandle handle, std::vector<std::string> stop,
               ReasoningFormat reasoning)
    : engine_(engine),
      handle_(std::move(handle)),
      decoder_(tokenizer, {.render_special = reasoning == ReasoningFormat::kHarmony}),
      stop_(std::move(stop)) {
  if (reasoning == ReasoningFormat::kDeepseek) reasoning_.emplace();
  if (reasoning == ReasoningFormat::kHarmony) harmony_.emplace();
}

Choice::~Choice() {
  Abort();
}

void Choice::Abort() {
  if (finished_) return;
  finished_ = true;
  engine_.Abort(handle_.id);
}

void Choice::AddText(std::string_view text, ChoiceDelta& delta) {
  if (!reasoning_ && !harmony_) {
    delta.text += text;
    return;
  }
  ReasoningParser::Parts parts = reasoning_ ? reasoning_->Push(text) : harmony_->Push(text);
  delta.reasoning += parts.reasoning;
  delta.text += parts.content;
}

void Choice::Finish(engine::FinishReason reason, ChoiceDelta& delta) {
  if (reasoning_ || harmony_) {
    ReasoningParser::Parts parts = reasoning_ ? reasoning_->Flush() : harmony_->Flush();
    delta.reasoning += parts.reasoning;
    delta.text += parts.content;
  }
  delta.finish_reason = reason;
  finished_ = true;
}

std::optional<ChoiceDelta> Choice::Next(bool block) {
  if (finished_) return std::nullopt;
  std::optional<engine::RequestOutput> out =
      block ? handle_.stream->Next() : handle_.stream->TryNext();
  if (!out) {
    if (!block) return std::nullopt;
    ChoiceDelta delta;  // the stream closed without a finish: cannot happen, end cleanly
    Finish(engine::FinishReason::kAbort, delta);
    return delta;
  }
  ChoiceDelta delta;
  num_cached_tokens_ = out->num_cached_tokens;
  for (engine::TokenOutput& token : out->tokens) {  // several after accepted drafts
    ++num_generated_;
    StopMatcher::Step step = stop_.Push(decoder_.Push(token.token));
    delta.tokens.push_back(std::move(token));
    AddText(step.text, delta);
    if (step.stopped) {
      engine_.Abort(handle_.id);  // frees the blocks now; the stream's tail is dropped
      Finish(engine::FinishReason::kStop, delta);
      return delta;
    }
  }
  if (out->finish) {
    // Flush the decoder through the stop matcher: the last bytes may complete a stop string.
    StopMatcher::Step step = stop_.Push(decoder_.Flush());
    AddText(step.text, delta);
    if (!step.stopped) AddText(stop_.Flush(), delta);
    delta.error = out->error;
    Finish(step.stopped ? engine::FinishReason::kStop : *out->finish, delta);
  }
  return delta;
}

}  // namespace kvserve::server
