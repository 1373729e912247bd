#include "planner/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace kvserve::planner {
namespace {

Result<int> ParseInt(std::string_view text, std::string_view whole) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < 0) {
    return InvalidArgument(fmt::format("layer list '{}': '{}' is not a layer index", whole, text));
  }
  return value;
}

}  // namespace

std::string_view TpPlacementName(TpPlacement p) {
  return p == TpPlacement::kSharded ? "sharded" : "replicated";
}

const WeightPart* ModelDesc::FindPart(std::string_view part_name) const {
  for (const WeightPart& p : parts) {
    if (p.name == part_name) return &p;
  }
  return nullptr;
}

Result<std::vector<int>> ParseLayerList(std::string_view text) {
  std::set<int> layers;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    if (item.empty()) return InvalidArgument(fmt::format("layer list '{}': empty item", text));
    int step = 1;
    if (size_t slash = item.find('/'); slash != std::string_view::npos) {
      KV_ASSIGN_OR_RETURN(step, ParseInt(item.substr(slash + 1), text));
      if (step <= 0) return InvalidArgument(fmt::format("layer list '{}': step 0", text));
      item = item.substr(0, slash);
    }
    int first = 0;
    int last = 0;
    if (size_t dash = item.find('-'); dash != std::string_view::npos) {
      KV_ASSIGN_OR_RETURN(first, ParseInt(item.substr(0, dash), text));
      KV_ASSIGN_OR_RETURN(last, ParseInt(item.substr(dash + 1), text));
    } else {
      KV_ASSIGN_OR_RETURN(first, ParseInt(item, text));
      last = first;
    }
    if (last < first) return InvalidArgument(fmt::format("layer list '{}': empty range", text));
    for (int layer = first; layer <= last; layer += step) layers.insert(layer);
    pos = comma + 1;
  }
  return std::vector<int>(layers.begin(), layers.end());
}

std::string FormatLayerList(const std::vector<int>& layers) {
  std::string out;
  size_t i = 0;
  while (i < layers.size()) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return out;
}

Status ValidateModel(const ModelDesc& model, int block_size) {
  if (model.num_layers <= 0) return InvalidArgument(model.name + ": num_layers must be positive");
  if (model.max_model_len <= 0) {
    return InvalidArgument(model.name + ": max_model_len must be positive");
  }
  uint64_t sum = 0;
  for (const WeightPart& p : model.parts) sum += p.bytes;
  if (sum != model.total_weight_bytes) {
    return InvalidArgument(fmt::format("{}: weight parts sum to {} B, total is {} B", model.name,
                                       sum, model.total_weight_bytes));
  }
  if (model.kv_groups.empty()) return InvalidArgument(model.name + ": no KV groups");
  for (const KvGroupDesc& g : model.kv_groups) {
    KV_RETURN_IF_ERROR(kv::ValidateSpec(g.spec, block_size).WithContext(model.name + " " + g.name));
    if (g.layers.empty()) return InvalidArgument(model.name + " " + g.name + ": no layers");
    for (const std::vector<int>* list : {&g.layers, &g.readers}) {
      for (int layer : *list) {
        if (layer < 0 || layer >= model.num_layers) {
          return InvalidArgument(fmt::format("{} {}: layer {} outside [0, {})", model.name, g.name,
                                             layer, model.num_layers));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvserve::planner
