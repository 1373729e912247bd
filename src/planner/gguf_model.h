// A ModelDesc from a GGUF file: the KV layout from the same function `kvserve serve` uses
// (model::ReadModelKvShape + model::MakeModelKvLayout, model/kv_layout.h), the weights from
// the tensor table. Supported: llama and other transformers with llama.cpp's standard
// attention keys (full attention, optional `{arch}.attention.sliding_window`) and
// kvserve-v41 (sliding FP8 window + shared FP4 latents).
#pragma once

#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "planner/model.h"

namespace kvserve::planner {

// Weights: 1-D tensors (norms, biases) are replicated under TP, everything else sharded;
// nothing is offloadable. KV: the model's groups with `auto` KV dtype (f32 KV when every
// weight matrix is f32, else f16: model::ModelActivationDType, what `kvserve serve` uses by
// default); kv_shape is set, so PlanKvConfig rebuilds the config for the plan's knobs with
// the server's function. runtime_reserve_bytes is 0 (pass --runtime-reserve to plan one).
Result<ModelDesc> ModelFromGguf(const gguf::GgufFile& file);
Result<ModelDesc> LoadGgufModel(const std::string& path);

}  // namespace kvserve::planner
