// Random-weight GGUF `llama` models: make-model's presets (tiny, 110m) and the shapes tests
// build (model/random_weights.h has the generator).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/random_weights.h"

namespace kvserve::model {

struct LlamaSpec {
  std::string name = "custom";  // written as general.name "kvserve-random-<name>"
  int64_t dim = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t ffn_dim = 96;
  int64_t vocab_size = 128;
  int64_t context_length = 256;
  bool tied_output = false;                 // no output.weight: logits use token_embd.weight
  std::optional<int64_t> rope_dim;          // written when set (readers default to head_dim)
  std::optional<double> rope_freq_base;     // written when set (readers default to 10000)
  std::optional<double> rope_linear_scale;  // rope.scaling.type "linear" when set

  int64_t HeadDim() const { return dim / num_heads; }
  int64_t KvDim() const { return HeadDim() * num_kv_heads; }
  int64_t NumParams() const;
};

// "tiny" (~1M parameters, outputs that vary) or "110m" (llama2.c's stories110M shape, tied
// output); InvalidArgument otherwise.
Result<LlamaSpec> FindLlamaPreset(std::string_view name);

// The model's metadata, weights and, when vocab_size >= 260, a SentencePiece vocabulary
// (SetSpmTokenizer; a smaller model has token ids only). Weights: matrices uniform with variance
// 1/fan_in (bound sqrt(3 / fan_in)), so activations keep their scale; embeddings with variance 1;
// the output with variance 4/dim, so logits have standard deviation ~2 (peaked, not degenerate).
Result<gguf::GgufWriter> LlamaRandomWriter(const LlamaSpec& spec, const RandomWeights& weights);

}  // namespace kvserve::model
