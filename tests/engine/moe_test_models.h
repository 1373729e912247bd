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

// `kvserve make-model --arch ARCH --preset PRESET --type f32 --seed 5` into a temp file.
inline std::string WriteTinyModel(std::string_view arch, std::string_view preset) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         fmt::format("kvserve-{}-{}-{}.gguf", arch, preset, ::getpid()))
                            .string();
  Result<const model::Architecture*> a = model::FindArchitecture(arch);
  CHECK(a.ok());
  model::RandomWeights weights;
  weights.seed = 5;
  weights.norm_spread = 0.2f;
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

}  // namespace kvserve::engine::testing
