// Random-weight (or shape-only) GGUF `kvserve-v41` models: the `mini` test model and the
// DeepSeek-V4.1-Flash shape (metadata only) for `kvserve inspect` and the planner.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/random_weights.h"
#include "model/v41_config.h"
#include "tensor/dtype.h"

namespace kvserve::model {

struct V41ModelSpec {
  V41Config config;  // dims; config.sources sets the compression layout
  bool with_weights = true;  // false: metadata only (vocab_size written as metadata)
  RandomWeights weights;     // matrix types and seed (model/random_weights.h)
};

// "mini": hidden 256, 8 layers, 4 heads of latent dim 64 (rope 16), ffn 512, vocab 512,
// window 16, sources 2 (ratio 2) and 5 (ratio 1), indexer 4 heads x 32 dims, top-k 32,
// context 2048.
// "v41-flash-shape": 40 layers, hidden 5120, 64 heads, latent 512 (rope 64), window 128,
// sources 2, 8, 14 (ratio 2) and 20 (ratio 1), indexer 32 x 128, top-k 512, candidate stage
// 2048 blocks of 8, context 1048576; no weights.
// InvalidArgument for another name.
Result<V41ModelSpec> FindV41Preset(std::string_view name);

// The writer for a spec: metadata (v41_config.h keys) and, with weights, uniform +-1/sqrt(fan_in)
// matrices (model/random_weights.h) and, when vocab_size >= 260, a SentencePiece vocabulary.
// Same spec -> same bytes.
Result<gguf::GgufWriter> V41ModelWriter(const V41ModelSpec& spec);

}  // namespace kvserve::model
