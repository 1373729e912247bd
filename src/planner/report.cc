#include "planner/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/units.h"

namespace kvserve::planner {
namespace {

double GiB(uint64_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

std::string Placement(const WeightPlacement& w, int tp) {
  if (w.offloaded) return "-> CPU memory";
  if (w.tp == TpPlacement::kReplicated) return tp > 1 ? "copy on every rank" : "on the device";
  return tp > 1 ? fmt::format("1/{} per rank", tp) : "on the device";
}

void AppendWeights(const Plan& p, std::string& out) {
  out += fmt::format("1. Weights (model total {})\n", FormatBytes(p.model.total_weight_bytes));
  out += fmt::format("   {:<22} {:<11} {:<20} {:>12} {:>12}\n", "part", "tp", "placement", "model",
                     "per device");
  for (const WeightPlacement& w : p.weights) {
    out += fmt::format("   {:<22} {:<11} {:<20} {:>12} {:>12}\n", w.name, TpPlacementName(w.tp),
                       Placement(w, p.options.tp), FormatBytes(w.model_bytes),
                       FormatBytes(w.device_bytes));
  }
  out += fmt::format("   {:<66} {:>12}\n", "resident weights per device",
                     FormatBytes(p.device_weight_bytes));
}

void AppendPool(const Plan& p, std::string& out) {
  out += fmt::format("2. Runtime / activation reserve per device{:>36}\n",
                     FormatBytes(p.reserve_bytes));
  if (p.kv_budget_fixed) {
    out += fmt::format("3. KV pool per device (--kv-cache-memory-bytes){:>30}\n",
                       FormatBytes(static_cast<uint64_t>(p.kv_pool_bytes)));
    return;
  }
  out += fmt::format("3. KV pool per device{:>57}\n",
                     p.kv_pool_bytes > 0 ? FormatBytes(static_cast<uint64_t>(p.kv_pool_bytes))
                                         : fmt::format("-{}", FormatBytes(-p.kv_pool_bytes)));
  out += fmt::format("   = {:.2f} x {:.2f} GiB - {:.2f} GiB weights - {:.2f} GiB reserve\n",
                     p.options.gpu_memory_utilization, GiB(p.device.memory_bytes),
                     GiB(p.device_weight_bytes), GiB(p.reserve_bytes));
}

void AppendGroups(const Plan& p, std::string& out) {
  out += fmt::format("   KV groups per rank (block size {}):\n", p.options.block_size);
  for (const KvGroupPlan& g : p.groups) {
    out += fmt::format("   - {} [{}] layers {}{}{}\n", g.name, g.spec, g.layers,
                       g.readers.empty() ? "" : "; readers (no allocation) " + g.readers,
                       g.replicated_under_tp ? "; replicated on every TP rank" : "");
    out += fmt::format("       {}{}\n", g.per_token.formula,
                       g.sliding ? " per token inside the window only" : " per token");
    out += fmt::format("       arena {} blocks x {} B = {}\n", g.capacity.num_blocks,
                       g.capacity.block_bytes, FormatBytes(g.capacity.arena_bytes));
  }
  out += fmt::format("   bytes every token adds (non-sliding groups): {:g} B\n",
                     p.growing_bytes_per_token);
}

void AppendCapacity(const Plan& p, std::string& out) {
  const PlanOptions& o = p.options;
  out += fmt::format("4. KV tokens per replica\n");
  out += fmt::format("   pool / bytes per token = {} / {:g} B = {} tokens\n",
                     FormatBytes(static_cast<uint64_t>(p.kv_pool_bytes)), p.growing_bytes_per_token,
                     FormatCount(p.pool_over_bytes_per_token));
  out += fmt::format(
      "   allocator (kv::ComputeCapacity at max-model-len {}, chunk {}): {} tokens "
      "({})\n",
      o.max_model_len, o.max_num_batched_tokens, FormatCount(p.capacity.num_tokens),
      p.capacity.num_tokens);
  if (p.model.quoted_kv_tokens && p.kv_pool_bytes > 0) {
    const double implied = static_cast<double>(p.kv_pool_bytes) / *p.model.quoted_kv_tokens;
    out += fmt::format(
        "   quoted: ~{} tokens ({}) implies {:.0f} B = {:.2f} KB per token, {:.2f}x "
        "the {:g} B above\n",
        FormatCount(static_cast<double>(*p.model.quoted_kv_tokens)),
        p.model.quoted_kv_tokens_source, implied, implied / 1000,
        implied / p.growing_bytes_per_token, p.growing_bytes_per_token);
  }
  out += fmt::format(
      "5. Max concurrency at --max-model-len {}: {} requests per replica ({} in "
      "all)\n   {}\n",
      o.max_model_len, p.max_concurrency, p.max_concurrency * p.num_replicas, p.capacity.formula);
  if (p.longest_len_at_max_num_seqs) {
    out += fmt::format("6. Longest --max-model-len with --max-num-seqs {} all at full length: {}\n",
                       o.max_num_seqs, *p.longest_len_at_max_num_seqs);
  } else {
    out += fmt::format("6. --max-num-seqs {} requests do not fit even at 1 token each\n",
                       o.max_num_seqs);
  }
}

void AppendFixedAndCpu(const Plan& p, std::string& out) {
  out += "7. Fixed per-sequence costs (sliding windows)\n";
  bool any = false;
  for (const KvGroupPlan& g : p.groups) {
    if (!g.sliding) continue;
    any = true;
    out += fmt::format("   {}: {} decoding, {} at a {}-token prefill chunk\n", g.name,
                       FormatBytes(g.decode_seq_bytes), FormatBytes(g.prefill_seq_bytes),
                       p.options.max_num_batched_tokens);
  }
  if (any) {
    out += fmt::format(
        "   x --max-num-seqs {} = {} decoding\n", p.options.max_num_seqs,
        FormatBytes(static_cast<uint64_t>(p.fixed_seq_decode_bytes) * p.options.max_num_seqs));
  } else {
    out += "   none (no sliding-window groups)\n";
  }
  out += "8. CPU memory per replica host\n";
  out += fmt::format("   offloaded weights {}; CPU KV tier {} ({} tokens per rank); total {}\n",
                     FormatBytes(p.cpu_weight_bytes), FormatBytes(p.cpu_kv_tier_bytes),
                     FormatCount(static_cast<double>(p.cpu_kv_tier_tokens)),
                     FormatBytes(p.cpu_total_bytes));
}

}  // namespace

std::string FormatCount(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string FormatPlanText(const Plan& p) {
  const PlanOptions& o = p.options;
  std::string out =
      fmt::format("kvserve plan: {} on {} x {} (TP {}, {} replica{})\n", p.model.name, o.num_gpus,
                  p.device.name, o.tp, p.num_replicas, p.num_replicas == 1 ? "" : "s");
  out += fmt::format("device memory {} ({}); x {:.2f} usable = {}\n",
                     FormatBytes(p.device.memory_bytes), p.device.description,
                     o.gpu_memory_utilization, FormatBytes(p.usable_bytes));
  AppendWeights(p, out);
  AppendPool(p, out);
  if (!p.groups.empty()) {
    AppendGroups(p, out);
    AppendCapacity(p, out);
    AppendFixedAndCpu(p, out);
  }
  for (const std::string& note : p.notes) out += "note: " + note + "\n";
  return out;
}

nlohmann::json PlanToJson(const Plan& p) {
  using Json = nlohmann::json;
  const PlanOptions& o = p.options;
  Json j;
  j["model"] = p.model.name;
  j["device"] = {{"name", p.device.name}, {"memory_bytes", p.device.memory_bytes}};
  j["options"] = {{"num_gpus", o.num_gpus},
                  {"tp", o.tp},
                  {"gpu_memory_utilization", o.gpu_memory_utilization},
                  {"max_model_len", o.max_model_len},
                  {"max_num_seqs", o.max_num_seqs},
                  {"max_num_batched_tokens", o.max_num_batched_tokens},
                  {"kv_cache_dtype", o.kv_cache_dtype},
                  {"block_size", o.block_size},
                  {"cpu_offload_weights", o.cpu_offload_parts}};
  j["num_replicas"] = p.num_replicas;
  Json weights = Json::array();
  for (const WeightPlacement& w : p.weights) {
    weights.push_back({{"name", w.name},
                       {"tp", std::string(TpPlacementName(w.tp))},
                       {"offloaded", w.offloaded},
                       {"model_bytes", w.model_bytes},
                       {"device_bytes", w.device_bytes}});
  }
  j["weights"] = weights;
  j["device_weight_bytes"] = p.device_weight_bytes;
  j["usable_bytes"] = p.usable_bytes;
  j["reserve_bytes"] = p.reserve_bytes;
  j["kv_pool_bytes"] = p.kv_pool_bytes;
  j["fits"] = p.fits;
  Json groups = Json::array();
  for (const KvGroupPlan& g : p.groups) {
    groups.push_back({{"name", g.name},
                      {"spec", g.spec},
                      {"layers", g.layers},
                      {"readers", g.readers},
                      {"sliding", g.sliding},
                      {"replicated_under_tp", g.replicated_under_tp},
                      {"bytes_per_token", g.per_token.bytes},
                      {"formula", g.per_token.formula},
                      {"num_blocks", g.capacity.num_blocks},
                      {"block_bytes", g.capacity.block_bytes},
                      {"arena_bytes", g.capacity.arena_bytes},
                      {"decode_seq_bytes", g.decode_seq_bytes},
                      {"prefill_seq_bytes", g.prefill_seq_bytes}});
  }
  j["kv_groups"] = groups;
  j["bytes_per_token"] = p.growing_bytes_per_token;
  j["pool_over_bytes_per_token"] = p.pool_over_bytes_per_token;
  j["kv_tokens"] = p.capacity.num_tokens;
  j["max_concurrency"] = p.max_concurrency;
  j["max_concurrency_exact"] = p.capacity.max_concurrency;
  j["longest_len_at_max_num_seqs"] =
      p.longest_len_at_max_num_seqs ? Json(*p.longest_len_at_max_num_seqs) : Json(nullptr);
  j["fixed_seq_decode_bytes"] = p.fixed_seq_decode_bytes;
  j["fixed_seq_prefill_bytes"] = p.fixed_seq_prefill_bytes;
  j["cpu"] = {{"offloaded_weight_bytes", p.cpu_weight_bytes},
              {"kv_tier_bytes", p.cpu_kv_tier_bytes},
              {"kv_tier_tokens_per_rank", p.cpu_kv_tier_tokens},
              {"total_bytes", p.cpu_total_bytes}};
  if (p.model.quoted_kv_tokens) {
    j["quoted_kv_tokens"] = *p.model.quoted_kv_tokens;
    j["quoted_implied_bytes_per_token"] =
        static_cast<double>(p.kv_pool_bytes) / *p.model.quoted_kv_tokens;
  }
  j["notes"] = p.notes;
  return j;
}

namespace {

struct Segment {
  std::string label;
  uint64_t bytes = 0;
  const char* color = "";
};

// One bar: segments stacked bottom-up, each height proportional to bytes / scale.
std::string SvgBar(const std::string& title, const std::vector<Segment>& segments, double x,
                   double scale_bytes) {
  constexpr double kTop = 40;
  constexpr double kHeight = 400;
  constexpr double kWidth = 60;
  std::string out = fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n",
      x + kWidth / 2, kTop + kHeight + 16, title);
  double y = kTop + kHeight;
  for (const Segment& s : segments) {
    const double h = kHeight * static_cast<double>(s.bytes) / scale_bytes;
    y -= h;
    out += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"{:.0f}\" height=\"{:.1f}\" fill=\"{}\" "
        "stroke=\"#333\"><title>{}: {}</title></rect>\n",
        x, y, kWidth, h, s.color, s.label, FormatBytes(s.bytes));
    if (h >= 12) {
      out += fmt::format(
          "<text x=\"{:.0f}\" y=\"{:.1f}\" font-size=\"9\" "
          "text-anchor=\"middle\">{} {:.1f}G</text>\n",
          x + kWidth / 2, y + h / 2 + 3, s.label, GiB(s.bytes));
    }
  }
  return out;
}

}  // namespace

std::string PlanToSvg(const Plan& p) {
  std::vector<Segment> device;
  for (const WeightPlacement& w : p.weights) {
    if (w.device_bytes == 0) continue;
    device.push_back(
        {w.name, w.device_bytes, w.tp == TpPlacement::kReplicated ? "#e07b39" : "#4a7ab7"});
  }
  device.push_back({"reserve", p.reserve_bytes, "#999999"});
  if (p.kv_pool_bytes > 0)
    device.push_back({"KV", static_cast<uint64_t>(p.kv_pool_bytes), "#59a14f"});
  const uint64_t used = p.device_weight_bytes + p.reserve_bytes +
                        static_cast<uint64_t>(std::max<int64_t>(p.kv_pool_bytes, 0));
  if (p.device.memory_bytes > used) {
    device.push_back({"free", p.device.memory_bytes - used, "#f2f2f2"});
  }
  const int bars = std::min(p.options.num_gpus, 16);
  const bool cpu_bar = p.cpu_total_bytes > 0;
  const double scale = static_cast<double>(
      std::max<uint64_t>({p.device.memory_bytes, used, cpu_bar ? p.cpu_total_bytes : 0}));
  const double width = 40 + 80.0 * (bars + (cpu_bar ? 1 : 0));
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"480\" "
      "font-family=\"sans-serif\">\n<text x=\"10\" y=\"20\" font-size=\"13\">{} on {} x {} "
      "(TP {})</text>\n",
      width, p.model.name, p.options.num_gpus, p.device.name, p.options.tp);
  for (int i = 0; i < bars; ++i) {
    out += SvgBar(fmt::format("{} {}", p.device.name, i), device, 20 + 80.0 * i, scale);
  }
  if (cpu_bar) {
    std::vector<Segment> cpu = {{"weights", p.cpu_weight_bytes, "#b07aa1"},
                                {"KV tier", p.cpu_kv_tier_bytes, "#76b7b2"}};
    out += SvgBar("CPU memory", cpu, 20 + 80.0 * bars, scale);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace kvserve::planner
