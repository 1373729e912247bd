// libFuzzer target: the tokenizers (SPM and byte-level BPE with their pre-tokenizers) on
// arbitrary bytes, with real vocabularies from ../shared/tokenizers. The first byte picks the
// vocabulary and the options; the rest is the text. Every id is in the vocabulary; the
// streaming decoder only ever emits valid UTF-8; decoding never crashes.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

const char* kVocabs[] = {"llama-spm", "gpt-2", "deepseek-llm", "deepseek-coder", "phi-3",
                         "starcoder"};
constexpr size_t kNumVocabs = sizeof(kVocabs) / sizeof(kVocabs[0]);

std::vector<std::unique_ptr<kvserve::tokenizer::Tokenizer>>* Load() {
  auto* tokenizers = new std::vector<std::unique_ptr<kvserve::tokenizer::Tokenizer>>();
  for (const char* name : kVocabs) {
    const std::string path =
        std::string(KVSERVE_SHARED_DIR) + "/tokenizers/ggml-vocab-" + name + ".gguf";
    auto file = kvserve::gguf::GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz needs %s\n", path.c_str());
      std::abort();
    }
    auto tok = kvserve::tokenizer::Tokenizer::FromGguf(**file);
    if (!tok.ok()) std::abort();
    tokenizers->push_back(std::make_unique<kvserve::tokenizer::Tokenizer>(std::move(*tok)));
  }
  return tokenizers;
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

std::vector<std::unique_ptr<kvserve::tokenizer::Tokenizer>>* tokenizers = nullptr;

}  // namespace

// Loads the vocabularies once, before the clock of the first input starts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers = Load();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const kvserve::tokenizer::Tokenizer& tok = *(*tokenizers)[data[0] % kNumVocabs];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids =
      tok.Encode(text, {.add_special = (data[0] & 0x40) != 0, .parse_special = (data[0] & 0x80) != 0});
  for (int32_t id : ids) {
    if (!tok.vocab().IsValid(id)) __builtin_trap();
  }
  (void)tok.Decode(ids);
  kvserve::tokenizer::StreamDecoder decoder(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.Push(id);
    if (!IsValidUtf8(piece)) __builtin_trap();
    streamed += piece;
  }
  if (!IsValidUtf8(decoder.Flush())) __builtin_trap();
  return 0;
}
