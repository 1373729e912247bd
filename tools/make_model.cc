// `kvserve make-model [--arch A] --preset P [--type T] [--seed N] -o FILE`: one of an
// architecture's presets (model/architecture.h) with random weights.
#include "tools/make_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "gguf/gguf.h"
#include "model/architecture.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

constexpr std::array<tensor::DType, 5> kMatrixTypes = {tensor::DType::kF32, tensor::DType::kF16,
                                                       tensor::DType::kBF16, tensor::DType::kQ8_0,
                                                       tensor::DType::kQ4_0};

Result<const model::Architecture*> FindPresetOf(const MakeModelOptions& options) {
  KV_ASSIGN_OR_RETURN(const model::Architecture* arch, model::FindArchitecture(options.arch));
  for (std::string_view p : arch->presets) {
    if (p == options.preset) return arch;
  }
  return InvalidArgument(fmt::format("unknown --preset '{}' for {} ({})", options.preset,
                                     arch->name, fmt::join(arch->presets, ", ")));
}

}  // namespace

Status MakeModel(const MakeModelOptions& options) {
  if (std::find(kMatrixTypes.begin(), kMatrixTypes.end(), options.type) == kMatrixTypes.end()) {
    return InvalidArgument(fmt::format("--type {} is not one of f32, f16, bf16, q8_0, q4_0",
                                       tensor::DTypeName(options.type)));
  }
  KV_ASSIGN_OR_RETURN(const model::Architecture* arch, FindPresetOf(options));
  model::RandomWeights weights;
  weights.matrix_type = options.type;
  weights.seed = options.seed;
  KV_ASSIGN_OR_RETURN(gguf::GgufWriter writer, arch->write_random(options.preset, weights));
  return writer.Write(options.output_path);
}

void RegisterMakeModel(CLI::App& app) {
  auto options = std::make_shared<MakeModelOptions>();
  auto type_name = std::make_shared<std::string>("f32");
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a GGUF model with deterministic random weights and a vocabulary");
  std::vector<std::string> arch_names, presets;
  for (const model::Architecture& a : model::Architectures()) {
    arch_names.emplace_back(a.name);
    for (std::string_view p : a.presets) presets.push_back(fmt::format("{} ({})", p, a.name));
  }
  cmd->add_option("--arch", options->arch,
                  "Architecture: " + fmt::format("{}", fmt::join(arch_names, ", ")))
      ->capture_default_str();
  cmd->add_option("--preset", options->preset,
                  "Model shape: " + fmt::format("{}", fmt::join(presets, ", ")))
      ->capture_default_str();
  cmd->add_option("--type", *type_name, "Type of the weight matrices: f32, f16, bf16, q8_0, q4_0")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("-o,--output", options->output_path, "Output .gguf file")->required();
  cmd->callback([options, type_name] {
    const std::optional<tensor::DType> type = tensor::DTypeFromName(*type_name);
    if (!type) {
      ReportFailure("make-model", InvalidArgument(fmt::format("unknown --type '{}'", *type_name)));
      return;
    }
    options->type = *type;
    const auto start = std::chrono::steady_clock::now();
    if (Status s = MakeModel(*options); !s.ok()) {
      ReportFailure("make-model", s);
      return;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t num_params = 0;
    if (Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(options->output_path);
        file.ok()) {
      for (const gguf::TensorInfo& t : (*file)->tensors()) num_params += t.NumElements();
    }
    fmt::print("wrote {}: {} preset {}, {} matrices, {} parameters, seed {} ({:.2f} s)\n",
               options->output_path, options->arch, options->preset, *type_name, num_params,
               options->seed, seconds);
  });
}

}  // namespace kvserve::tools
