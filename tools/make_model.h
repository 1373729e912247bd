// `kvserve make-model`: a GGUF model of any registered architecture (model/architecture.h)
// with deterministic random weights (model/random_weights.h) and a complete vocabulary,
// loadable by kvserve and llama.cpp (tests, benchmarks, demos).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tensor/dtype.h"

namespace kvserve::tools {

struct MakeModelOptions {
  std::string arch = "llama";  // general.architecture of a registered architecture
  std::string preset = "tiny";
  tensor::DType type = tensor::DType::kF32;  // the weight matrices' type
  uint64_t seed = 1;
  std::string output_path;
};

// Builds and writes the model. Same options -> the same bytes.
[[nodiscard]] Status MakeModel(const MakeModelOptions& options);

}  // namespace kvserve::tools
