// A ModelDesc from a GGUF file: the KV layout from `{arch}.*` metadata, the weights from the
// tensor table. Supported: transformers with llama.cpp's standard attention keys (llama and
// its relatives: full attention, optional `{arch}.attention.sliding_window`); other layouts
// (DeepSeek-V4.1-style latents) are added here as their architectures land.
#pragma once

#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "planner/model.h"

namespace kvserve::planner {

// Weights: 1-D tensors (norms, biases) are replicated under TP, everything else sharded;
// nothing is offloadable. KV: one group, f32 KV when the token embeddings are f32 and f16
// otherwise (kv::ParseKvCacheDType "auto", what `kvserve serve` uses by default).
// runtime_reserve_bytes is 0 (pass --runtime-reserve to plan one).
Result<ModelDesc> ModelFromGguf(const gguf::GgufFile& file);
Result<ModelDesc> LoadGgufModel(const std::string& path);

}  // namespace kvserve::planner
