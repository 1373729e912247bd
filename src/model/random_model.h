// Random-weight GGUF `llama` models for tests and benchmarks (no trained weights needed).
#pragma once

#include <cstdint>
#include <optional>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace kvserve::model {

struct RandomModelSpec {
  int64_t dim = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t ffn_dim = 96;
  int64_t vocab_size = 128;
  int64_t context_length = 256;
  tensor::DType matrix_dtype = tensor::DType::kF32;  // every 2-D weight; norms stay F32
  bool tied_output = false;                          // omit output.weight
  std::optional<int64_t> rope_dim;                   // written when set
  std::optional<double> rope_freq_base;              // written when set
  std::optional<double> rope_linear_scale;           // rope.scaling.type "linear" when set
  uint64_t seed = 1;
};

// A writer holding the model's metadata and tensors: weights uniform in +-1/sqrt(fan_in) from a
// fixed-seed generator (the same spec always gives the same bytes), norm weights near 1.
// Tests may edit it (Set, more tensors) before serializing.
gguf::GgufWriter RandomModelWriter(const RandomModelSpec& spec);

}  // namespace kvserve::model
