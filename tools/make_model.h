// `kvserve make-model`: a GGUF llama model with deterministic random weights and a complete
// SentencePiece-style vocabulary, loadable by kvserve and llama.cpp (tests, benchmarks, demos).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tensor/dtype.h"

namespace kvserve::tools {

// A llama architecture's shape.
struct LlamaShape {
  std::string name;  // preset name, written as general.name "kvserve-random-<name>"
  int64_t dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  bool tied_output = false;  // no output.weight: logits use token_embd.weight (as llama2.c)

  int64_t HeadDim() const { return dim / num_heads; }
  int64_t KvDim() const { return HeadDim() * num_kv_heads; }
};

// "tiny" (~1M parameters) or "110m" (110M: llama2.c's stories110M shape, tied output); InvalidArgument otherwise.
Result<LlamaShape> FindPreset(std::string_view name);

// The SentencePiece-style token texts: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
// then distinct pieces ("▁", letters, "▁"+common words, letter pairs and triples...) in a fixed
// order until vocab_size. note: vocab_size >= 260.
std::vector<std::string> MakeVocabTokens(int64_t vocab_size);

struct MakeModelOptions {
  std::string arch = "llama";  // or "kvserve-v41" (presets mini, v41-flash-shape: model/v41_random_model.h)
  std::string preset = "tiny";
  tensor::DType type = tensor::DType::kF32;  // f32, f16, q8_0 or q4_0
  uint64_t seed = 1;
  std::string output_path;
};

// Builds and writes the model. Same options -> the same bytes.
[[nodiscard]] Status MakeModel(const MakeModelOptions& options);

}  // namespace kvserve::tools
