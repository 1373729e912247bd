// `kvserve make-model [--arch A] --preset P [--type T] [--seed N] -o FILE`: one of an
// architecture's presets (model/architecture.h) with random weights.
#include "tools/make_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <memory>
#include <variant>
#include <vector>

#include "gguf/gguf.h"
#include "model/architecture.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

Result<const model::Architecture*> FindPresetOf(const MakeModelOptions& options) {
  KV_ASSIGN_OR_RETURN(const model::Architecture* arch, model::FindArchitecture(options.arch));
  for (std::string_view p : arch->presets) {
    if (p == options.preset) return arch;
  }
  return InvalidArgument(fmt::format("unknown --preset '{}' for {} ({})", options.preset,
                                     arch->name, fmt::join(arch->presets, ", ")));
}

std::string FileTypeNames() {
  std::vector<std::string_view> names;
  for (const model::FileTypeInfo& t : model::FileTypes()) names.push_back(t.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// What llama.cpp's quantize rules read about a preset: its metadata and tensor list, from a
// pass of the architecture's writer that adds no tensor data.
Result<model::QuantMixModel> DescribeForMix(const model::Architecture& arch,
                                            std::string_view preset) {
  model::QuantMixModel m;
  m.has_output = false;
  model::RandomWeights listing;
  listing.list_only = [&m](std::string_view name, const std::vector<int64_t>&) {
    if (name == "output.weight") m.has_output = true;
  };
  KV_ASSIGN_OR_RETURN(gguf::GgufWriter w, arch.write_random(preset, listing));
  auto u64 = [&w](const std::string& key, int64_t fallback) {
    const gguf::Value* v = w.Find(key);
    return v != nullptr && std::holds_alternative<uint64_t>(v->data)
               ? static_cast<int64_t>(std::get<uint64_t>(v->data))
               : fallback;
  };
  m.architecture = std::string(arch.name);
  const std::string a = m.architecture + ".";
  m.num_layers = u64(a + "block_count", 0);
  m.num_heads = std::max<int64_t>(1, u64(a + "attention.head_count", 1));
  m.num_kv_heads = std::max<int64_t>(1, u64(a + "attention.head_count_kv", m.num_heads));
  return m;
}

}  // namespace

Status MakeModel(const MakeModelOptions& options) {
  KV_ASSIGN_OR_RETURN(const model::Architecture* arch, FindPresetOf(options));
  const model::FileTypeInfo& type = model::GetFileTypeInfo(options.type);
  model::RandomWeights weights;
  weights.matrix_type = type.base;
  weights.seed = options.seed;
  if (tensor::IsIntegerQuant(type.base)) {  // per-tensor types (and block-size fallbacks)
    model::QuantMixModel mix;
    if (type.mixed) {
      KV_ASSIGN_OR_RETURN(mix, DescribeForMix(*arch, options.preset));
      weights.file_type = type.llama_ftype;
    }
    weights.type_of = [mix, file_type = options.type](std::string_view name, int64_t row_len,
                                                      int64_t rows) {
      const int64_t dims[2] = {row_len, rows};
      return model::QuantTypeFor(file_type, mix, name, dims);
    };
  }
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
  cmd->add_option("--type", *type_name,
                  "Weight types: pure f32, f16, bf16, q8_0, q4_0, or llama.cpp's quantize mix of "
                  "that name (q4_k_m, q5_k_m, q6_k, q4_k_s, q3_k_m, q2_k, q4_1, q5_0, q5_1, "
                  "iq4_nl, iq4_xs)")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("-o,--output", options->output_path, "Output .gguf file")->required();
  cmd->callback([options, type_name] {
    const std::optional<model::FileType> type = model::FileTypeFromName(*type_name);
    if (!type) {
      ReportFailure("make-model", InvalidArgument(fmt::format("unknown --type '{}' (one of {})",
                                                              *type_name, FileTypeNames())));
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
