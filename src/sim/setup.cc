#include "sim/setup.h"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <map>

#include "core/units.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "planner/gguf_model.h"
#include "planner/plan.h"
#include "planner/presets.h"

namespace kvserve::sim {
namespace {

struct Model {
  planner::ModelDesc desc;
  ModelCompute compute;
};

Result<Model> LoadModel(const std::string& name) {
  if (name.empty()) return InvalidArgument("--model is required (a preset or a .gguf file)");
  Model m;
  if (name.ends_with(".gguf")) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(name));
    KV_ASSIGN_OR_RETURN(m.desc, planner::ModelFromGguf(*file));
    KV_ASSIGN_OR_RETURN(m.compute, ComputeFromGguf(*file));
    return m;
  }
  KV_ASSIGN_OR_RETURN(m.desc, planner::LoadModelPreset(name));
  KV_ASSIGN_OR_RETURN(m.compute, LoadComputePreset(name));
  return m;
}

// The per-device KV budget: the flag, the planner's pool on a --gpu device, or serve's CPU
// default.
Result<uint64_t> KvBudget(const SimKnobs& k, const Model& model) {
  const engine::EngineConfig& e = k.engine;
  if (e.kv_cache_bytes) return *e.kv_cache_bytes;
  if (k.gpu.empty()) {
    if (!k.cpu_offload_weights.empty()) {
      return InvalidArgument("--cpu-offload-weights needs --gpu (a device whose memory is planned)");
    }
    return kv::DefaultCpuKvBudgetBytes();
  }
  KV_ASSIGN_OR_RETURN(planner::DeviceDesc device, planner::LoadDevicePreset(k.gpu));
  planner::PlanOptions o;
  o.tp = k.tp;
  o.num_gpus = k.tp;
  o.gpu_memory_utilization = k.gpu_memory_utilization;
  o.max_model_len = e.max_model_len.value_or(model.desc.max_model_len);
  o.max_num_seqs = e.max_num_seqs;
  o.max_num_batched_tokens = e.max_num_batched_tokens;
  o.kv_cache_dtype = e.kv_cache_dtype;
  o.cpu_offload_parts = k.cpu_offload_weights;
  o.block_size = e.block_size;
  KV_ASSIGN_OR_RETURN(planner::Plan plan, planner::MakePlan(model.desc, device, o));
  if (plan.kv_pool_bytes <= 0) {
    return InvalidArgument(fmt::format(
        "{} does not fit on {} x tp {}: the weights and reserve leave no KV pool ({}); try "
        "--tp, --cpu-offload-weights or --gpu-memory-utilization", model.desc.name, k.gpu, k.tp,
        plan.notes.empty() ? std::string("see kvserve plan") : plan.notes.front()));
  }
  return static_cast<uint64_t>(plan.kv_pool_bytes);
}

Result<HardwareProfile> LoadHardware(const SimKnobs& k) {
  if (k.gpu.empty() == k.profile.empty()) {
    return InvalidArgument("give exactly one of --gpu PRESET and --profile FILE");
  }
  return k.profile.empty() ? LoadDeviceProfile(k.gpu) : LoadProfileFile(k.profile);
}

std::vector<std::string> Knobs(const SimKnobs& k, const SimSetup& s) {
  const engine::EngineConfig& e = k.engine;
  std::vector<std::string> out = {
      fmt::format("max-num-seqs {}", e.max_num_seqs),
      fmt::format("max-num-batched-tokens {}", e.max_num_batched_tokens),
      fmt::format("max-model-len {}", s.scheduler.max_model_len),
      fmt::format("block-size {}", e.block_size),
      fmt::format("kv-cache-dtype {}", e.kv_cache_dtype),
      fmt::format("KV budget {} per rank", FormatBytes(s.kv_budget_bytes))};
  if (!e.enable_prefix_caching) out.push_back("no prefix caching");
  if (!k.cpu_offload_weights.empty()) {
    out.push_back(fmt::format("weights in CPU memory: {}", fmt::join(k.cpu_offload_weights, ",")));
  }
  if (s.offload) out.push_back("KV tiers: " + s.offload->Describe() + " per rank");
  return out;
}

}  // namespace

Result<PreparedSim> Prepare(const SimKnobs& k) {
  const engine::EngineConfig& e = k.engine;
  if (e.speculative) return Unimplemented("speculative decoding is not simulated");
  KV_ASSIGN_OR_RETURN(Model model, LoadModel(k.model));
  KV_ASSIGN_OR_RETURN(HardwareProfile hardware, LoadHardware(k));
  if (k.tp < 1) return InvalidArgument("--tp must be at least 1");
  KV_RETURN_IF_ERROR(kv::ValidateBlockSize(e.block_size));
  KV_ASSIGN_OR_RETURN(const uint64_t budget, KvBudget(k, model));
  const int64_t context = model.desc.max_model_len;
  KV_ASSIGN_OR_RETURN(kv::KvCacheConfig at_context,
                      planner::PlanKvConfig(model.desc, k.tp, e.block_size, context,
                                            e.max_num_batched_tokens, e.kv_cache_dtype));
  KV_ASSIGN_OR_RETURN(const int64_t max_model_len,
                      engine::ResolveMaxModelLen(at_context, budget, context, e.max_model_len));
  PreparedSim p;
  SimSetup& s = p.setup;
  KV_ASSIGN_OR_RETURN(s.kv_config,
                      planner::PlanKvConfig(model.desc, k.tp, e.block_size, max_model_len,
                                            e.max_num_batched_tokens, e.kv_cache_dtype));
  s.scheduler = {e.max_num_seqs, e.max_num_batched_tokens, max_model_len};
  KV_RETURN_IF_ERROR(scheduler::ValidateSchedulerConfig(s.scheduler));
  s.kv_budget_bytes = budget;
  s.enable_prefix_caching = e.enable_prefix_caching;
  if (e.offload) {
    s.offload = *e.offload;
    s.offload->cpu_bytes_to_use /= static_cast<uint64_t>(k.tp);
  }
  s.vocab_size = static_cast<int32_t>(model.compute.vocab_size);
  s.seed = k.workload.seed;
  KV_ASSIGN_OR_RETURN(p.cost, CostModel::Create(model.compute, s.kv_config, hardware, k.tp));
  KV_ASSIGN_OR_RETURN(p.workload, MakeWorkload(k.workload, max_model_len));
  p.label.model = fmt::format("{} ({})", model.desc.name, model.desc.source);
  p.label.hardware = fmt::format("{} x tp {}", hardware.name, k.tp);
  p.label.knobs = Knobs(k, s);
  return p;
}

namespace {

template <typename T>
Status ParseInto(const std::string& name, const std::string& text, T& out) {
  T v{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgument(fmt::format("--sweep {}: '{}' is not a number", name, text));
  }
  out = v;
  return Status::Ok();
}

using Setter = std::function<Status(SimKnobs&, const std::string& name, const std::string& v)>;

const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> setters = {
      {"max-num-batched-tokens",
       [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.engine.max_num_batched_tokens); }},
      {"max-num-seqs", [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.engine.max_num_seqs); }},
      {"max-model-len",
       [](SimKnobs& k, const auto& n, const auto& v) {
         int64_t len = 0;
         KV_RETURN_IF_ERROR(ParseInto(n, v, len));
         k.engine.max_model_len = len;
         return Status::Ok();
       }},
      {"block-size", [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.engine.block_size); }},
      {"tp", [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.tp); }},
      {"kv-cache-dtype",
       [](SimKnobs& k, const auto&, const auto& v) -> Status {
         KV_RETURN_IF_ERROR(kv::ParseKvCacheDType(v, tensor::DType::kF16).status());
         k.engine.kv_cache_dtype = v;
         return Status::Ok();
       }},
      {"kv-cache-memory-bytes",
       [](SimKnobs& k, const auto&, const auto& v) -> Status {
         KV_ASSIGN_OR_RETURN(uint64_t bytes, kv::ParseKvBudget(v));
         k.engine.kv_cache_bytes = bytes;
         return Status::Ok();
       }},
      {"gpu-memory-utilization",
       [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.gpu_memory_utilization); }},
      {"request-rate",
       [](SimKnobs& k, const auto& n, const auto& v) { return ParseInto(n, v, k.workload.request_rate); }},
      {"kv-offloading-size",
       [](SimKnobs& k, const auto&, const auto& v) -> Status {
         if (v == "0") {  // no CPU tier: the baseline of a tier sweep
           k.engine.offload.reset();
           return Status::Ok();
         }
         KV_ASSIGN_OR_RETURN(offload::OffloadConfig c, offload::OffloadConfigFromSize(v));
         k.engine.offload = c;
         return Status::Ok();
       }},
      {"enable-prefix-caching",
       [](SimKnobs& k, const auto& n, const auto& v) {
         if (v != "true" && v != "false") {
           return InvalidArgument(fmt::format("--sweep {}: '{}' is not true or false", n, v));
         }
         k.engine.enable_prefix_caching = v == "true";
         return Status::Ok();
       }},
  };
  return setters;
}

}  // namespace

Status SetKnob(SimKnobs& knobs, const std::string& name, const std::string& value) {
  auto it = Setters().find(name);
  if (it == Setters().end()) {
    return InvalidArgument(fmt::format("--sweep: unknown knob '{}' (known: {})", name,
                                       fmt::join(SweepableKnobs(), ", ")));
  }
  return it->second(knobs, name, value);
}

std::vector<std::string> SweepableKnobs() {
  std::vector<std::string> names;
  for (const auto& [name, setter] : Setters()) names.push_back(name);
  return names;
}

}  // namespace kvserve::sim
