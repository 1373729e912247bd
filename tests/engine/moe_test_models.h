// The mixture-of-experts models the engine tests share (make-model's tiny presets, F32),
// written once per process.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/check.h"
#include "engine_test_util.h"
#include "model/architecture.h"

namespace kvserve::engine::testing {

// `kvserve make-model --arch ARCH --preset PRESET --type f32 --seed 5` into a temp file
// (`type_of`, when set, picks each tensor's type instead).
inline std::string WriteTinyModel(std::string_view arch, std::string_view preset,
                                  model::TensorTypeFn type_of = nullptr) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         fmt::format("kvserve-{}-{}-{}.gguf", arch, preset, ::getpid()))
                            .string();
  Result<const model::Architecture*> a = model::FindArchitecture(arch);
  CHECK(a.ok());
  model::RandomWeights weights;
  weights.seed = 5;
  weights.norm_spread = 0.2f;
  weights.type_of = std::move(type_of);
  Result<gguf::GgufWriter> w = (*a)->write_random(preset, weights);
  CHECK(w.ok()) << w.status().ToString();
  CHECK(w->Write(p).ok());
  RemoveAtExit(p);
  return p;
}

// deepseek2 tiny: MLA latent cache (one 96-value row per token per layer) and MoE layers.
inline std::string Deepseek2Path() {
  static const std::string path = WriteTinyModel("deepseek2", "tiny");
  return path;
}

// qwen3moe tiny: GQA (2 KV heads x 48 dims, q/k norms) over 4 layers, each a mixture of 8
// experts with 2 per token (normalised).
inline std::string Qwen3MoePath() {
  static const std::string path = WriteTinyModel("qwen3moe", "tiny");
  return path;
}

// qwen2moe tiny: q/k/v biases, 8 experts with 4 per token plus a sigmoid-gated shared expert.
inline std::string Qwen2MoePath() {
  static const std::string path = WriteTinyModel("qwen2moe", "tiny");
  return path;
}

// gpt-oss tiny with its experts in MXFP4 (the rest F32): attention sinks, 16-token windows on
// even layers, 8 biased experts with 4 per token, the MXFP4 matmul grouped over the batch.
inline std::string GptOssPath() {
  static const std::string path =
      WriteTinyModel("gpt-oss", "tiny", [](std::string_view name, int64_t, int64_t) {
        return name.ends_with("_exps.weight") ? tensor::DType::kMXFP4 : tensor::DType::kF32;
      });
  return path;
}

}  // namespace kvserve::engine::testing
