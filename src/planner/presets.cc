#include "planner/presets.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/units.h"
#include "planner/json_fields.h"

namespace kvserve::planner {
namespace {

// planner/json_fields.h reads in this file's required / optional form.
Result<std::string> GetString(const Json& obj, const char* key, bool required = true) {
  return StringField(obj, key, required ? std::nullopt : std::optional<std::string>(""));
}

Result<int64_t> GetInt(const Json& obj, const char* key, std::optional<int64_t> fallback = {}) {
  return IntField(obj, key, fallback);
}

bool GetBool(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

Result<uint64_t> GetBytes(const Json& obj, const char* key) {
  KV_ASSIGN_OR_RETURN(std::string text, GetString(obj, key));
  return ParseBytes(text);
}

Result<tensor::DType> GetDType(const Json& obj, const char* key, tensor::DType fallback) {
  KV_ASSIGN_OR_RETURN(std::string name, GetString(obj, key, /*required=*/false));
  if (name.empty()) return fallback;
  auto dtype = tensor::DTypeFromName(name);
  if (!dtype) return InvalidArgument(fmt::format("field '{}': unknown dtype '{}'", key, name));
  return *dtype;
}

Result<kv::KvLayoutSpec> ParseSpec(const Json& g, const std::string& kind) {
  using tensor::DType;
  if (kind == "full_attention" || kind == "sliding_window") {
    KV_ASSIGN_OR_RETURN(int64_t heads, GetInt(g, "kv_heads"));
    KV_ASSIGN_OR_RETURN(int64_t dim, GetInt(g, "head_dim"));
    KV_ASSIGN_OR_RETURN(DType dtype, GetDType(g, "dtype", DType::kF16));
    const bool shared = GetBool(g, "shared_kv");
    if (kind == "full_attention") {
      return kv::KvLayoutSpec(
          kv::FullAttention{static_cast<int>(heads), static_cast<int>(dim), dtype, shared});
    }
    KV_ASSIGN_OR_RETURN(int64_t window, GetInt(g, "window"));
    return kv::KvLayoutSpec(kv::SlidingWindow{static_cast<int>(window), static_cast<int>(heads),
                                              static_cast<int>(dim), dtype, shared});
  }
  if (kind == "compressed_latent") {
    kv::CompressedLatent s;
    KV_ASSIGN_OR_RETURN(int64_t dim, GetInt(g, "latent_dim"));
    KV_ASSIGN_OR_RETURN(int64_t ratio, GetInt(g, "compress_ratio", 1));
    KV_ASSIGN_OR_RETURN(int64_t index_dim, GetInt(g, "index_key_dim", 0));
    s.latent_dim = static_cast<int>(dim);
    s.compress_ratio = static_cast<int>(ratio);
    s.index_key_dim = static_cast<int>(index_dim);
    KV_ASSIGN_OR_RETURN(s.latent_dtype, GetDType(g, "dtype", s.latent_dtype));
    KV_ASSIGN_OR_RETURN(s.index_dtype, GetDType(g, "index_dtype", s.index_dtype));
    return kv::KvLayoutSpec(s);
  }
  return InvalidArgument(fmt::format("unknown KV kind '{}'", kind));
}

Result<KvGroupDesc> ParseKvGroup(const Json& g) {
  if (!g.is_object()) return InvalidArgument("each kv entry must be an object");
  KvGroupDesc group;
  KV_ASSIGN_OR_RETURN(group.name, GetString(g, "name"));
  KV_ASSIGN_OR_RETURN(std::string kind, GetString(g, "kind"));
  KV_ASSIGN_OR_RETURN(group.spec, ParseSpec(g, kind));
  KV_ASSIGN_OR_RETURN(std::string layers, GetString(g, "layers"));
  KV_ASSIGN_OR_RETURN(group.layers, ParseLayerList(layers));
  KV_ASSIGN_OR_RETURN(std::string readers, GetString(g, "readers", /*required=*/false));
  if (!readers.empty()) {
    KV_ASSIGN_OR_RETURN(group.readers, ParseLayerList(readers));
  }
  group.fixed_dtype = GetBool(g, "fixed_dtype");
  KV_ASSIGN_OR_RETURN(group.note, GetString(g, "note", /*required=*/false));
  return group;
}

Status ParseWeights(const Json& w, ModelDesc& model) {
  if (!w.is_object()) return InvalidArgument("'weights' must be an object");
  KV_ASSIGN_OR_RETURN(model.total_weight_bytes, GetBytes(w, "total"));
  auto parts = w.find("parts");
  if (parts == w.end() || !parts->is_array()) return InvalidArgument("weights.parts missing");
  std::optional<size_t> rest_index;
  uint64_t named_sum = 0;
  for (const Json& p : *parts) {
    if (!p.is_object()) return InvalidArgument("each weights part must be an object");
    WeightPart part;
    KV_ASSIGN_OR_RETURN(part.name, GetString(p, "name"));
    KV_ASSIGN_OR_RETURN(std::string bytes, GetString(p, "bytes"));
    if (bytes == "rest") {
      if (rest_index) return InvalidArgument("weights: more than one part is 'rest'");
      rest_index = model.parts.size();
    } else {
      KV_ASSIGN_OR_RETURN(part.bytes, ParseBytes(bytes));
      named_sum += part.bytes;
    }
    KV_ASSIGN_OR_RETURN(std::string tp, GetString(p, "tp"));
    if (tp != "sharded" && tp != "replicated") {
      return InvalidArgument(fmt::format("part '{}': tp must be sharded or replicated", part.name));
    }
    part.tp = tp == "sharded" ? TpPlacement::kSharded : TpPlacement::kReplicated;
    part.offloadable = GetBool(p, "offloadable");
    KV_ASSIGN_OR_RETURN(part.note, GetString(p, "note", /*required=*/false));
    model.parts.push_back(std::move(part));
  }
  if (named_sum > model.total_weight_bytes) {
    return InvalidArgument("weights: parts add up to more than the total");
  }
  if (rest_index) model.parts[*rest_index].bytes = model.total_weight_bytes - named_sum;
  return Status::Ok();
}

Status ParseModelFields(const Json& j, ModelDesc& model) {
  if (!j.is_object()) return InvalidArgument("a model preset must be a JSON object");
  KV_ASSIGN_OR_RETURN(model.name, GetString(j, "name"));
  KV_ASSIGN_OR_RETURN(model.description, GetString(j, "description", /*required=*/false));
  KV_ASSIGN_OR_RETURN(int64_t layers, GetInt(j, "num_layers"));
  model.num_layers = static_cast<int>(layers);
  KV_ASSIGN_OR_RETURN(model.max_model_len, GetInt(j, "max_model_len"));
  KV_ASSIGN_OR_RETURN(model.runtime_reserve_bytes, GetBytes(j, "runtime_reserve"));
  auto weights = j.find("weights");
  if (weights == j.end()) return InvalidArgument("missing field 'weights'");
  KV_RETURN_IF_ERROR(ParseWeights(*weights, model));
  if (j.contains("quoted_kv_tokens")) {
    KV_ASSIGN_OR_RETURN(int64_t quoted, GetInt(j, "quoted_kv_tokens"));
    model.quoted_kv_tokens = quoted;
    KV_ASSIGN_OR_RETURN(model.quoted_kv_tokens_source,
                        GetString(j, "quoted_kv_tokens_source", /*required=*/false));
  }
  auto kv_list = j.find("kv");
  if (kv_list == j.end() || !kv_list->is_array()) return InvalidArgument("missing array 'kv'");
  for (const Json& g : *kv_list) {
    KV_ASSIGN_OR_RETURN(KvGroupDesc group, ParseKvGroup(g));
    model.kv_groups.push_back(std::move(group));
  }
  return Status::Ok();
}

std::string JoinNames(const std::vector<std::string>& names) {
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

Result<ModelDesc> ParseModelPreset(std::string_view text) {
  KV_ASSIGN_OR_RETURN(Json j, ParseJsonText(text, "model preset"));
  ModelDesc model;
  Status s = ParseModelFields(j, model);
  if (!s.ok()) return s.WithContext("model preset '" + model.name + "'");
  model.source = "preset " + model.name;
  KV_RETURN_IF_ERROR(ValidateModel(model, /*block_size=*/16));
  return model;
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const PresetFile& f : EmbeddedPresetFiles()) {
    if (f.path.starts_with("models/") && f.path.ends_with(".jsonc")) {
      std::string_view stem = f.path.substr(7, f.path.size() - 7 - 6);
      names.emplace_back(stem);
    }
  }
  return names;
}

Result<ModelDesc> LoadModelPreset(std::string_view name) {
  const std::string path = fmt::format("models/{}.jsonc", name);
  for (const PresetFile& f : EmbeddedPresetFiles()) {
    if (f.path == path) return ParseModelPreset(f.text);
  }
  return NotFound(
      fmt::format("no model preset '{}' (known: {})", name, JoinNames(ModelPresetNames())));
}

Result<uint64_t> ReadMemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * kKiB;
  }
  return IoError("cannot read MemTotal from /proc/meminfo");
}

Result<std::vector<DeviceDesc>> ParseDevicePresets(std::string_view text) {
  KV_ASSIGN_OR_RETURN(Json j, ParseJsonText(text, "device presets"));
  if (!j.is_array()) return InvalidArgument("device presets: expected an array");
  std::vector<DeviceDesc> devices;
  for (const Json& d : j) {
    if (!d.is_object()) return InvalidArgument("device presets: each entry must be an object");
    DeviceDesc device;
    KV_ASSIGN_OR_RETURN(device.name, GetString(d, "name"));
    KV_ASSIGN_OR_RETURN(device.description, GetString(d, "description", /*required=*/false));
    KV_ASSIGN_OR_RETURN(std::string memory, GetString(d, "memory"));
    if (memory == "meminfo") {
      device.is_cpu = true;
      KV_ASSIGN_OR_RETURN(device.memory_bytes, ReadMemTotalBytes());
    } else {
      Result<uint64_t> bytes = ParseBytes(memory);
      if (!bytes.ok()) return bytes.status().WithContext("device " + device.name);
      device.memory_bytes = *bytes;
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

namespace {
Result<std::vector<DeviceDesc>> EmbeddedDevices() {
  for (const PresetFile& f : EmbeddedPresetFiles()) {
    if (f.path == "devices.jsonc") return ParseDevicePresets(f.text);
  }
  return Internal("devices.jsonc is not embedded");
}
}  // namespace

std::vector<std::string> DevicePresetNames() {
  std::vector<std::string> names;
  Result<std::vector<DeviceDesc>> devices = EmbeddedDevices();
  if (!devices.ok()) return names;
  for (const DeviceDesc& d : *devices) names.push_back(d.name);
  return names;
}

Result<DeviceDesc> LoadDevicePreset(std::string_view name) {
  KV_ASSIGN_OR_RETURN(std::vector<DeviceDesc> devices, EmbeddedDevices());
  for (DeviceDesc& d : devices) {
    if (d.name == name) return std::move(d);
  }
  return NotFound(
      fmt::format("no device preset '{}' (known: {})", name, JoinNames(DevicePresetNames())));
}

}  // namespace kvserve::planner
