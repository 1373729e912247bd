#include "planner/gguf_model.h"

#include <fmt/format.h>

#include "model/kv_layout.h"

namespace kvserve::planner {
namespace {

void AddWeights(const gguf::GgufFile& file, ModelDesc& model) {
  WeightPart replicated{"norms (1-D)", 0, TpPlacement::kReplicated, false,
                        "1-D tensors: norms and biases, copied on every TP rank"};
  WeightPart sharded{"matrices", 0, TpPlacement::kSharded, false,
                     "2-D and larger tensors: projections and embeddings"};
  for (const gguf::TensorInfo& t : file.tensors()) {
    (t.dims.size() <= 1 ? replicated : sharded).bytes += t.size_bytes;
  }
  model.parts = {replicated, sharded};
  model.total_weight_bytes = replicated.bytes + sharded.bytes;
}

}  // namespace

Result<ModelDesc> ModelFromGguf(const gguf::GgufFile& file) {
  Result<model::ModelKvShape> read = model::ReadModelKvShape(file);
  if (!read.ok()) return read.status().WithContext(file.path());
  model::ModelKvShape shape = *std::move(read);
  ModelDesc model;
  KV_ASSIGN_OR_RETURN(model.name, file.GetStringOr("general.name", shape.architecture));
  model.description = fmt::format("GGUF {} model", shape.architecture);
  model.source = file.path();
  model.num_layers = shape.num_layers;
  model.max_model_len = shape.context_length;
  // The groups at the default knobs, for their names, layers and model-format specs.
  Result<model::ModelKvLayout> made = model::MakeModelKvLayout(shape, model::KvLayoutOptions{});
  if (!made.ok()) return made.status().WithContext(file.path());
  model::ModelKvLayout layout = *std::move(made);
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    model::KvGroupInfo& info = layout.groups[g];
    KvGroupDesc desc;
    desc.name = std::move(info.name);
    desc.spec = layout.config.groups[g].spec;
    desc.layers = std::move(info.layers);
    desc.readers = std::move(info.readers);
    desc.fixed_dtype = info.fixed_dtype;
    model.kv_groups.push_back(std::move(desc));
  }
  model.kv_shape = std::move(shape);
  AddWeights(file, model);
  KV_RETURN_IF_ERROR(ValidateModel(model, /*block_size=*/16).WithContext(file.path()));
  return model;
}

Result<ModelDesc> LoadGgufModel(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return ModelFromGguf(*file);
}

}  // namespace kvserve::planner
