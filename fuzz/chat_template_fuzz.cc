// libFuzzer target: the chat-template renderer. The input is split at NUL bytes: the first
// piece is Jinja text (family detection, as for a GGUF's tokenizer.chat_template), then
// alternating role / content pieces. Every input renders or returns a Status; a rendering
// contains every user message's content, whitespace-trimmed (templates may trim, as Llama 3's
// does; system prompts may be dropped when no user message follows, as Llama 2's are).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> pieces;
  size_t start = 0;
  while (true) {
    const size_t end = input.find('\0', start);
    pieces.push_back(input.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  const ChatTemplate chat = ChatTemplate::FromJinja(pieces[0], "<s>", "</s>");
  std::vector<ChatMessage> messages;
  for (size_t i = 1; i + 1 < pieces.size(); i += 2) {
    messages.push_back({std::string(pieces[i]), std::string(pieces[i + 1])});
  }
  for (bool generation_prompt : {false, true}) {
    auto text = chat.Apply(messages, generation_prompt);
    if (!text.ok()) continue;
    for (const ChatMessage& m : messages) {
      if (m.role != "user") continue;
      const size_t first = m.content.find_first_not_of(" \t\n\r\v\f");
      if (first == std::string::npos) continue;
      const size_t last = m.content.find_last_not_of(" \t\n\r\v\f");
      if (text->find(m.content.substr(first, last - first + 1)) == std::string::npos) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
