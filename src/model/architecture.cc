#include "model/architecture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <vector>

#include "model/llama.h"
#include "model/llama_random.h"
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

// ---- llama ----

constexpr std::array<std::string_view, 2> kLlamaPresets = {"tiny", "110m"};

Result<gguf::GgufWriter> WriteRandomLlama(std::string_view preset, const RandomWeights& weights) {
  KV_ASSIGN_OR_RETURN(LlamaSpec spec, FindLlamaPreset(preset));
  return LlamaRandomWriter(spec, weights);
}

// ---- kvserve-v41 ----

constexpr std::array<std::string_view, 2> kV41Presets = {"mini", "v41-flash-shape"};

Result<gguf::GgufWriter> WriteRandomV41(std::string_view preset, const RandomWeights& weights) {
  KV_ASSIGN_OR_RETURN(V41ModelSpec spec, FindV41Preset(preset));
  spec.weights.matrix_type = weights.matrix_type;
  spec.weights.type_of = weights.type_of;
  spec.weights.seed = weights.seed;
  return V41ModelWriter(spec);
}

const std::array<Architecture, 2> kArchitectures = {{
    {"llama", ReadDenseKvShape, LoadAs<LlamaModel>, kLlamaPresets, WriteRandomLlama},
    {kV41Architecture, ReadV41KvShape, LoadAs<V41Model>, kV41Presets, WriteRandomV41},
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
