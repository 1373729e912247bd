// `kvserve make-model`: a GGUF model of any registered architecture (model/architecture.h)
// with deterministic random weights (model/random_weights.h) and a complete vocabulary,
// loadable by kvserve and llama.cpp (tests, benchmarks, demos).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/quant_mix.h"

namespace kvserve::tools {

struct MakeModelOptions {
  std::string arch = "llama";  // general.architecture of a registered architecture
  std::string preset = "tiny";
  // The weights' types: pure (f32, f16, bf16, q8_0, q4_0) or llama.cpp's quantize mix of that
  // name (q4_k_m, q6_k, iq4_xs, ...: model/quant_mix.h).
  model::FileType type = model::FileType::kF32;
  uint64_t seed = 1;
  std::string output_path;
};

// Builds and writes the model. Same options -> the same bytes.
[[nodiscard]] Status MakeModel(const MakeModelOptions& options);

}  // namespace kvserve::tools
