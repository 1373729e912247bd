#include "model/architecture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <vector>

#include "model/deepseek2.h"
#include "model/deepseek2_random.h"
#include "model/dense.h"
#include "model/dense_random.h"
#include "model/v41.h"
#include "model/v41_random_model.h"

namespace kvserve::model {
namespace {

template <typename M>
Result<std::unique_ptr<Model>> LoadAs(std::shared_ptr<const gguf::GgufFile> file,
                                      const LoadOptions& options) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<M> model, M::Load(std::move(file), options));
  return std::unique_ptr<Model>(std::move(model));
}

// ---- the dense-attention architectures, MoE ones included (model/config.h, model/dense.h,
// model/dense_random.h) ----

Result<gguf::GgufWriter> WriteRandomDense(std::string_view arch, std::string_view preset,
                                          const RandomWeights& weights) {
  KV_ASSIGN_OR_RETURN(DenseSpec spec, FindDensePreset(arch, preset));
  return DenseRandomWriter(spec, weights);
}

template <const char* kName>
Result<gguf::GgufWriter> WriteRandom(std::string_view preset, const RandomWeights& weights) {
  return WriteRandomDense(kName, preset, weights);
}

constexpr char kLlama[] = "llama";
constexpr char kQwen2[] = "qwen2";
constexpr char kQwen3[] = "qwen3";
constexpr char kPhi3[] = "phi3";
constexpr char kGemma2[] = "gemma2";
constexpr char kGemma3[] = "gemma3";
constexpr char kQwen2Moe[] = "qwen2moe";
constexpr char kQwen3Moe[] = "qwen3moe";
constexpr char kGptOss[] = "gpt-oss";

template <const char* kName>
Architecture Dense() {
  return {kName, ReadDenseKvShape, LoadAs<DenseModel>, DensePresets(kName), WriteRandom<kName>};
}

// ---- kvserve-v41 ----

constexpr std::array<std::string_view, 2> kV41Presets = {"mini", "v41-flash-shape"};

Result<gguf::GgufWriter> WriteRandomV41(std::string_view preset, const RandomWeights& weights) {
  KV_ASSIGN_OR_RETURN(V41ModelSpec spec, FindV41Preset(preset));
  spec.weights.matrix_type = weights.matrix_type;
  spec.weights.type_of = weights.type_of;
  spec.weights.seed = weights.seed;
  spec.weights.list_only = weights.list_only;
  return V41ModelWriter(spec);
}

// ---- deepseek2 ----

constexpr std::array<std::string_view, 5> kDeepseek2Presets = {"tiny", "tiny-lite", "small",
                                                               "deepseek-v2-lite", "deepseek-v3"};

Result<gguf::GgufWriter> WriteRandomDeepseek2(std::string_view preset,
                                              const RandomWeights& weights) {
  KV_ASSIGN_OR_RETURN(Deepseek2Spec spec, FindDeepseek2Preset(preset));
  return Deepseek2RandomWriter(spec, weights);
}

const std::array<Architecture, 11> kArchitectures = {{
    Dense<kLlama>(),
    Dense<kQwen2>(),
    Dense<kQwen3>(),
    Dense<kPhi3>(),
    Dense<kGemma2>(),
    Dense<kGemma3>(),
    Dense<kQwen2Moe>(),
    Dense<kQwen3Moe>(),
    Dense<kGptOss>(),
    {kV41Architecture, ReadV41KvShape, LoadAs<V41Model>, kV41Presets, WriteRandomV41},
    {kDeepseek2Architecture, ReadDeepseek2KvShape, LoadAs<Deepseek2Model>, kDeepseek2Presets,
     WriteRandomDeepseek2},
}};

}  // namespace

std::span<const Architecture> Architectures() {
  return kArchitectures;
}

Result<const Architecture*> FindArchitecture(std::string_view name) {
  std::vector<std::string_view> names;
  for (const Architecture& a : kArchitectures) {
    if (a.name == name) return &a;
    names.push_back(a.name);
  }
  return Unimplemented(fmt::format("architecture '{}' is not supported (supported: {})", name,
                                   fmt::join(names, ", ")));
}

Result<const Architecture*> FindArchitecture(const gguf::GgufFile& file) {
  Result<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) return InvalidArgument("model metadata lacks 'general.architecture'");
  return FindArchitecture(*arch);
}

}  // namespace kvserve::model
