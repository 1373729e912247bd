#include "sim/hardware.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "planner/presets.h"
#include "planner/json_fields.h"

namespace kvserve::sim {
namespace {

using planner::Json;

Status ParseEfficiency(const Json& j, Efficiency& e) {
  if (!j.is_object()) return InvalidArgument("'efficiency' must be an object");
  struct Field {
    const char* key;
    double* value;
  };
  for (Field f : {Field{"gemm", &e.gemm}, Field{"memory", &e.memory},
                  Field{"attention", &e.attention}, Field{"link", &e.link},
                  Field{"host_link", &e.host_link}}) {
    KV_ASSIGN_OR_RETURN(*f.value, planner::NumberField(j, f.key, 1.0, /*positive=*/true));
    if (*f.value > 1) {
      return InvalidArgument(fmt::format("efficiency.{} must be in (0, 1], got {}", f.key, *f.value));
    }
  }
  return Status::Ok();
}

Result<TierSpeed> ParseTier(const Json& j, const char* key, TierSpeed fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_object()) return InvalidArgument(fmt::format("'{}' must be an object", key));
  TierSpeed t;
  const std::optional<double> bandwidth =
      fallback.bandwidth > 0 ? std::optional<double>(fallback.bandwidth) : std::nullopt;
  KV_ASSIGN_OR_RETURN(t.bandwidth, planner::NumberField(*it, "bandwidth", bandwidth, /*positive=*/true));
  KV_ASSIGN_OR_RETURN(t.latency, planner::NumberField(*it, "latency", 0.0));
  KV_ASSIGN_OR_RETURN(t.store_bandwidth, planner::NumberField(*it, "store_bandwidth", 0.0));
  if (t.latency < 0 || t.store_bandwidth < 0) {
    return InvalidArgument(fmt::format("{}: latency and store_bandwidth must not be negative", key));
  }
  return t;
}

Status ParseProfileFields(const Json& j, HardwareProfile& p) {
  if (!j.is_object()) return InvalidArgument("a hardware profile must be a JSON object");
  auto peaks = j.find("peak_flops");
  if (peaks == j.end() || !peaks->is_object() || peaks->empty()) {
    return InvalidArgument("'peak_flops' must be an object of dtype -> FLOP/s");
  }
  for (const auto& [dtype, value] : peaks->items()) {
    if (!value.is_number() || !(value.get<double>() > 0)) {
      return InvalidArgument(fmt::format("peak_flops.{} must be a positive number", dtype));
    }
    p.peak_flops[dtype] = value.get<double>();
  }
  KV_ASSIGN_OR_RETURN(p.description, planner::StringField(j, "description", p.description));
  KV_ASSIGN_OR_RETURN(p.attention_flops, planner::NumberField(j, "attention_flops", 0.0));
  KV_ASSIGN_OR_RETURN(p.memory_bandwidth,
                      planner::NumberField(j, "memory_bandwidth", std::nullopt, /*positive=*/true));
  KV_ASSIGN_OR_RETURN(p.attention_bandwidth,
                      planner::NumberField(j, "attention_bandwidth", 0.0));
  KV_ASSIGN_OR_RETURN(p.link_bandwidth, planner::NumberField(j, "link_bandwidth", 0.0));
  KV_ASSIGN_OR_RETURN(p.link_latency, planner::NumberField(j, "link_latency", 0.0));
  KV_ASSIGN_OR_RETURN(p.host_link_bandwidth, planner::NumberField(j, "host_link_bandwidth", 0.0));
  KV_ASSIGN_OR_RETURN(p.sampling_rate, planner::NumberField(j, "sampling_rate", 0.0));
  KV_ASSIGN_OR_RETURN(p.step_overhead, planner::NumberField(j, "step_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.sequence_overhead, planner::NumberField(j, "sequence_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.token_overhead, planner::NumberField(j, "token_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.engine_step_overhead,
                      planner::NumberField(j, "engine_step_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.engine_sequence_overhead,
                      planner::NumberField(j, "engine_sequence_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.engine_token_overhead,
                      planner::NumberField(j, "engine_token_overhead", 0.0));
  KV_ASSIGN_OR_RETURN(p.cached_kv_bytes, planner::NumberField(j, "cached_kv_bytes", 0.0));
  KV_ASSIGN_OR_RETURN(p.kv_spill_bandwidth, planner::NumberField(j, "kv_spill_bandwidth", 0.0));
  for (double v : {p.attention_flops, p.attention_bandwidth, p.link_bandwidth, p.link_latency,
                   p.host_link_bandwidth, p.sampling_rate, p.step_overhead, p.sequence_overhead,
                   p.token_overhead, p.engine_step_overhead, p.engine_sequence_overhead,
                   p.engine_token_overhead, p.cached_kv_bytes, p.kv_spill_bandwidth}) {
    if (v < 0) return InvalidArgument("rates, latencies and overheads must not be negative");
  }
  if (auto e = j.find("efficiency"); e != j.end()) KV_RETURN_IF_ERROR(ParseEfficiency(*e, p.efficiency));
  const TierSpeed host{p.host_link_bandwidth * p.efficiency.host_link, 0.0};
  KV_ASSIGN_OR_RETURN(p.cpu_tier, ParseTier(j, "cpu_tier", host));
  KV_ASSIGN_OR_RETURN(p.file_tier, ParseTier(j, "file_tier", TierSpeed{}));
  KV_ASSIGN_OR_RETURN(p.redis_tier, ParseTier(j, "redis_tier", p.file_tier));
  return Status::Ok();
}

}  // namespace

Result<double> HardwareProfile::GemmFlops(std::string_view dtype) const {
  std::vector<std::string> order = {std::string(dtype)};
  if (dtype.starts_with("fp4")) order.insert(order.end(), {"fp4", "fp8", "bf16"});
  if (dtype.starts_with("fp8")) order.insert(order.end(), {"fp8", "bf16"});
  order.insert(order.end(), {"bf16", "default"});
  for (const std::string& name : order) {
    if (auto it = peak_flops.find(name); it != peak_flops.end()) return it->second * efficiency.gemm;
  }
  return NotFound(fmt::format("hardware profile {} has no peak FLOP/s for {} weights (nor bf16)",
                              this->name, dtype));
}

double HardwareProfile::AttentionFlops() const {
  double peak = attention_flops;
  if (peak == 0) {
    auto it = peak_flops.find("bf16");
    peak = it != peak_flops.end() ? it->second : peak_flops.begin()->second;
  }
  return peak * efficiency.attention;
}

Result<HardwareProfile> ParseHardwareProfile(std::string_view json_text, std::string_view name) {
  KV_ASSIGN_OR_RETURN(Json j, planner::ParseJsonText(json_text, name));
  HardwareProfile p;
  KV_ASSIGN_OR_RETURN(p.name, planner::StringField(j, "name", std::string(name)));
  Status s = ParseProfileFields(j, p);
  if (!s.ok()) return s.WithContext(fmt::format("hardware profile {}", name));
  return p;
}

Result<HardwareProfile> LoadDeviceProfile(std::string_view name) {
  for (const planner::PresetFile& f : planner::EmbeddedPresetFiles()) {
    if (f.path != "devices.jsonc") continue;
    KV_ASSIGN_OR_RETURN(Json devices, planner::ParseJsonText(f.text, "devices.jsonc"));
    std::vector<std::string> with_compute;
    for (const Json& d : devices) {
      const std::string device = d.value("name", "");
      const bool has_compute = d.contains("compute");
      if (has_compute) with_compute.push_back(device);
      if (device != name) continue;
      if (!has_compute) {
        return NotFound(fmt::format(
            "device preset '{}' has no compute numbers; measure this machine with `kvserve "
            "simulate --calibrate MODEL.gguf -o cpu.json` and pass --profile cpu.json", name));
      }
      KV_ASSIGN_OR_RETURN(HardwareProfile p, ParseHardwareProfile(d["compute"].dump(), name));
      p.name = device;
      p.description = d.value("description", "");
      return p;
    }
    return NotFound(fmt::format("no device preset '{}' with compute numbers (known: {})", name,
                                fmt::join(with_compute, ", ")));
  }
  return Internal("devices.jsonc is not embedded");
}

Result<HardwareProfile> LoadProfileFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError(fmt::format("cannot read profile {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseHardwareProfile(text.str(), path);
}

std::string ProfileToJson(const HardwareProfile& p, std::string_view notes_json) {
  Json j;
  j["name"] = p.name;
  j["description"] = p.description;
  for (const auto& [dtype, flops] : p.peak_flops) j["peak_flops"][dtype] = flops;
  j["attention_flops"] = p.attention_flops;
  j["memory_bandwidth"] = p.memory_bandwidth;
  j["attention_bandwidth"] = p.attention_bandwidth;
  j["link_bandwidth"] = p.link_bandwidth;
  j["link_latency"] = p.link_latency;
  j["host_link_bandwidth"] = p.host_link_bandwidth;
  j["sampling_rate"] = p.sampling_rate;
  j["step_overhead"] = p.step_overhead;
  j["sequence_overhead"] = p.sequence_overhead;
  j["token_overhead"] = p.token_overhead;
  j["engine_step_overhead"] = p.engine_step_overhead;
  j["engine_sequence_overhead"] = p.engine_sequence_overhead;
  j["engine_token_overhead"] = p.engine_token_overhead;
  j["cached_kv_bytes"] = p.cached_kv_bytes;
  j["kv_spill_bandwidth"] = p.kv_spill_bandwidth;
  j["efficiency"] = {{"gemm", p.efficiency.gemm}, {"memory", p.efficiency.memory},
                     {"attention", p.efficiency.attention}, {"link", p.efficiency.link},
                     {"host_link", p.efficiency.host_link}};
  auto tier = [&](const char* key, const TierSpeed& t) {
    if (t.bandwidth <= 0) return;
    j[key] = {{"bandwidth", t.bandwidth}, {"latency", t.latency},
              {"store_bandwidth", t.store_bandwidth}};
  };
  tier("cpu_tier", p.cpu_tier);
  tier("file_tier", p.file_tier);
  tier("redis_tier", p.redis_tier);
  if (!notes_json.empty()) j["notes"] = Json::parse(notes_json, nullptr, false);
  return j.dump(2) + "\n";
}

}  // namespace kvserve::sim
