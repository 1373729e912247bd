// Random-weight GGUF `deepseek2` models for make-model and the tests (model/random_weights.h
// has the generator): presets
//   tiny       V3-like: q LoRA, sigmoid routing with a selection bias, normalised and scaled
//              top-k, YaRN; ~2M parameters, outputs that vary
//   tiny-lite  V2-Lite-like: plain Wq, softmax routing, top-k not normalised, YaRN
//   small      V2-Lite scaled down for speed work (~0.5B parameters, dims multiples of 256)
//   deepseek-v2-lite, deepseek-v3   the published shapes, metadata only (no tensors: for
//              `kvserve plan --model FILE` and `inspect`; serve refuses them)
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/deepseek2_config.h"
#include "model/random_weights.h"

namespace kvserve::model {

struct Deepseek2Spec {
  std::string name;
  Deepseek2Config config;
  bool shape_only = false;
};

Result<Deepseek2Spec> FindDeepseek2Preset(std::string_view name);

// Metadata (llama.cpp's keys, MLA-split form) and, unless shape_only, random weights and a
// SentencePiece vocabulary. Routers, attn_k_b / attn_v_b, norms and biases stay F32 whatever
// weights.TypeOf says.
Result<gguf::GgufWriter> Deepseek2RandomWriter(const Deepseek2Spec& spec,
                                               const RandomWeights& weights);

}  // namespace kvserve::model
