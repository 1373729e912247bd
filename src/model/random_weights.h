// Deterministic random weights and a SentencePiece-style vocabulary: the one writer behind
// `kvserve make-model` and every test that needs a model file (no trained weights needed).
// Each architecture's writer (model/architecture.h: write_random) lists its tensors through a
// RandomTensorWriter; the values of a tensor depend only on (seed, tensor name), so the same
// options always give the same bytes, on every platform.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace kvserve::model {

// The storage type of a weight matrix, from its name and shape (row_len = ne[0] = fan-in):
// quantization mixes (e.g. Q4_K_M) pick per tensor.
using TensorTypeFn =
    std::function<tensor::DType(std::string_view name, int64_t row_len, int64_t rows)>;

struct RandomWeights {
  tensor::DType matrix_type = tensor::DType::kF32;  // every matrix, unless type_of is set
  TensorTypeFn type_of;                             // per-tensor type; overrides matrix_type
  uint64_t seed = 1;
  float norm_spread = 0.0f;  // norm weights are 1 + norm_spread * U[-1, 1)
  // general.file_type to write instead of LlamaFileType of the matrices' type (mixes).
  std::optional<uint32_t> file_type;
  // When set, RandomTensorWriter only reports each tensor here (name, GGUF dims) and adds no
  // data: a cheap pass that lists a preset's tensors (make-model sizes mixes with it).
  std::function<void(std::string_view name, const std::vector<int64_t>& dims)> list_only;

  tensor::DType TypeOf(std::string_view name, int64_t row_len, int64_t rows) const {
    return type_of ? type_of(name, row_len, rows) : matrix_type;
  }
};

// Adds random tensors to a GgufWriter.
class RandomTensorWriter {
 public:
  RandomTensorWriter(gguf::GgufWriter& writer, const RandomWeights& options)
      : writer_(writer), options_(options) {}

  // A (rows, fan_in) matrix (GGUF dims {fan_in, rows}) uniform in [-bound, bound), stored as
  // options.TypeOf(name, fan_in, rows).
  Status Matrix(const std::string& name, int64_t fan_in, int64_t rows, float bound);
  // `count` stacked (rows, fan_in) matrices (GGUF dims {fan_in, rows, count}: MoE experts,
  // per-head projections), each matrix's type options.TypeOf(name, fan_in, rows).
  Status Stacked(const std::string& name, int64_t fan_in, int64_t rows, int64_t count, float bound);
  // An F32 vector of n values uniform in [-bound, bound) (biases).
  Status Bias(const std::string& name, int64_t n, float bound);
  // An F32 vector of n values: 1 + norm_spread * U[-1, 1) (norm weights).
  Status Norm(const std::string& name, int64_t n);
  // An F32 vector of n values uniform in [-bound, bound) (biases).
  Status Vector(const std::string& name, int64_t n, float bound);

 private:
  gguf::GgufWriter& writer_;
  const RandomWeights& options_;
};

// The SentencePiece-style token texts: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
// then distinct pieces ("▁", letters, "▁"+common words, letter pairs and triples...) in a fixed
// order until vocab_size. note: vocab_size >= 260.
std::vector<std::string> MakeVocabTokens(int64_t vocab_size);

// tokenizer.ggml.*: a SentencePiece ("llama") vocabulary of MakeVocabTokens(vocab_size), scores
// falling with the piece's rank so shorter, more common pieces merge first; BOS 1, EOS 2.
void SetSpmTokenizer(int64_t vocab_size, gguf::GgufWriter& writer);

// llama.cpp's general.file_type (llama_ftype) for a model whose matrices are mostly `type`.
uint32_t LlamaFileType(tensor::DType type);

}  // namespace kvserve::model
