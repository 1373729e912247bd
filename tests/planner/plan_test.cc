// The planner's numbers: the seed's worked example, TP behaviour, concurrency and context
// maths with hand-computed values, bad options, and the renderings.
#include "planner/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "planner/presets.h"
#include "planner/report.h"

namespace kvserve::planner {
namespace {

double GiB(double bytes) {
  return bytes / kGiB;
}

Plan MustPlan(const std::string& model, const std::string& device, const PlanOptions& options) {
  Result<ModelDesc> m = LoadModelPreset(model);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  Result<DeviceDesc> d = LoadDevicePreset(device);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  Result<Plan> plan = MakePlan(*m, *d, options);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return *std::move(plan);
}

PlanOptions SeedOptions() {
  PlanOptions o;
  o.num_gpus = 4;
  o.tp = 4;
  o.gpu_memory_utilization = 0.9;
  o.cpu_offload_parts = {"engram"};
  return o;
}

// kvserve plan --model deepseek-v4.1-flash --gpu h200 --tp 4 --cpu-offload-weights engram
//   --gpu-memory-utilization 0.9
TEST(SeedExample, WeightsPoolAndTokens) {
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", SeedOptions());
  EXPECT_NEAR(GiB(p.device_weight_bytes), 81.2, 0.1);
  EXPECT_NEAR(GiB(p.kv_pool_bytes), 38.5, 0.2);
  EXPECT_DOUBLE_EQ(p.growing_bytes_per_token, 890.0);
  // 38.5 GiB / 890 B: about 46M tokens, not the ~20M the document quotes.
  EXPECT_GT(p.pool_over_bytes_per_token, 45.5e6);
  EXPECT_LT(p.pool_over_bytes_per_token, 47.0e6);
  ASSERT_TRUE(p.model.quoted_kv_tokens.has_value());
  const double implied = static_cast<double>(p.kv_pool_bytes) / *p.model.quoted_kv_tokens;
  EXPECT_NEAR(implied / 1000, 2.07, 0.01);  // ~2.07 KB per token
  // Engram lives in CPU memory: 188.8 GiB there, nothing of it on the card.
  EXPECT_NEAR(GiB(p.cpu_weight_bytes), 188.8, 0.01);
  bool saw_replicated = false;
  for (const WeightPlacement& w : p.weights) {
    if (w.name == "engram") {
      EXPECT_TRUE(w.offloaded);
      EXPECT_EQ(w.device_bytes, 0u);
    }
    if (w.tp == TpPlacement::kReplicated) {
      saw_replicated = true;
      EXPECT_EQ(w.device_bytes, w.model_bytes);  // a full copy on every rank
    }
  }
  EXPECT_TRUE(saw_replicated);
  EXPECT_TRUE(p.fits);
  // The allocator's own count is below pool / 890: the sliding windows take their share.
  EXPECT_GT(p.capacity.num_tokens, 30'000'000);
  EXPECT_LT(static_cast<double>(p.capacity.num_tokens), p.pool_over_bytes_per_token);
  EXPECT_LE(p.capacity.total_arena_bytes, p.kv_pool_bytes);
}

TEST(SeedExample, GroupFormulas) {
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", SeedOptions());
  ASSERT_EQ(p.groups.size(), 3u);
  EXPECT_TRUE(p.groups[0].sliding);
  EXPECT_DOUBLE_EQ(p.groups[0].per_token.bytes, 40 * 528.0);     // inside the window only
  EXPECT_DOUBLE_EQ(p.groups[1].per_token.bytes, 3 * 356 / 2.0);  // 534 B
  EXPECT_DOUBLE_EQ(p.groups[2].per_token.bytes, 356.0);
  EXPECT_EQ(p.groups[1].readers, "3-7,9-13,15-19");
  for (const KvGroupPlan& g : p.groups) EXPECT_TRUE(g.replicated_under_tp) << g.name;
  // Decoding, a window of 128 tokens holds ceil(129 / 16) + 1 = 10 blocks per layer:
  // 40 layers x 10 blocks x 16 x 528 B.
  EXPECT_EQ(p.fixed_seq_decode_bytes, 40 * 10 * 16 * 528);
}

TEST(SeedExample, WithoutOffloadTheWeightsDoNotFit) {
  PlanOptions o = SeedOptions();
  o.cpu_offload_parts.clear();
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", o);
  EXPECT_FALSE(p.fits);
  EXPECT_LT(p.kv_pool_bytes, 0);
  EXPECT_FALSE(p.notes.empty());
}

// Single-head latent KV is replicated on every TP rank: capacity does not divide by TP, while
// a GQA model's per-rank bytes per token do.
TEST(TensorParallel, LatentIsReplicatedHeadsSplit) {
  PlanOptions o;
  o.kv_cache_memory_bytes = 8 * kGiB;
  o.max_model_len = 32768;
  o.num_gpus = 1;
  const Plan v4_tp1 = MustPlan("deepseek-v4.1-flash", "h200", o);
  const Plan v3_tp1 = MustPlan("deepseek-v3", "h200", o);
  const Plan llama_tp1 = MustPlan("llama-3.1-70b", "h200", o);
  o.num_gpus = 8;
  const Plan v4_tp8 = MustPlan("deepseek-v4.1-flash", "h200", o);
  const Plan v3_tp8 = MustPlan("deepseek-v3", "h200", o);
  const Plan llama_tp8 = MustPlan("llama-3.1-70b", "h200", o);
  EXPECT_EQ(v4_tp8.growing_bytes_per_token, v4_tp1.growing_bytes_per_token);
  EXPECT_EQ(v4_tp8.capacity.num_tokens, v4_tp1.capacity.num_tokens);
  EXPECT_EQ(v3_tp8.capacity.num_tokens, v3_tp1.capacity.num_tokens);
  EXPECT_DOUBLE_EQ(v3_tp1.growing_bytes_per_token, 61 * 576 * 2.0);
  // Llama 70B: 8 KV heads, 1 per rank at TP8: 1/8 of the bytes, 8x the tokens per budget.
  EXPECT_DOUBLE_EQ(llama_tp1.growing_bytes_per_token, 80 * 2 * 8 * 128 * 2.0);
  EXPECT_DOUBLE_EQ(llama_tp8.growing_bytes_per_token, llama_tp1.growing_bytes_per_token / 8);
  EXPECT_NEAR(static_cast<double>(llama_tp8.capacity.num_tokens) / llama_tp1.capacity.num_tokens,
              8.0, 0.05);
}

// Llama 3.1 8B in BF16: 2 x 32 layers x 8 heads x 128 dims x 2 B = 131072 B per token;
// a 16-token block is 2 MiB. Budget 10 GiB: usable = 10 GiB - 2 MiB (null block).
TEST(ConcurrencyMaths, HandComputed) {
  PlanOptions o;
  o.kv_cache_memory_bytes = 10 * kGiB;
  o.max_model_len = 8192;  // 512 blocks = 1 GiB per request
  o.max_num_seqs = 10;
  const Plan p = MustPlan("llama-3.1-8b", "h100", o);
  EXPECT_DOUBLE_EQ(p.growing_bytes_per_token, 131072.0);
  // (10 GiB - 2 MiB) / 1 GiB = 9.998 -> 9 requests of 8192 tokens.
  EXPECT_EQ(p.max_concurrency, 9);
  // 10 requests: 10 x ceil(L / 16) x 2 MiB <= 10 GiB - 2 MiB -> ceil(L / 16) <= 511 -> 8176.
  ASSERT_TRUE(p.longest_len_at_max_num_seqs.has_value());
  EXPECT_EQ(*p.longest_len_at_max_num_seqs, 8176);
  // Tokens: (10 GiB - 2 MiB) / 2 MiB = 5119 blocks x 16.
  EXPECT_EQ(p.capacity.num_tokens, 5119 * 16);
}

TEST(ConcurrencyMaths, LongestLenIsTheBoundary) {
  PlanOptions o;
  o.kv_cache_memory_bytes = 3 * kGiB;
  o.max_num_seqs = 7;
  const Plan p = MustPlan("gemma-3-27b", "h100", o);
  ASSERT_TRUE(p.longest_len_at_max_num_seqs.has_value());
  const int64_t l = *p.longest_len_at_max_num_seqs;
  kv::KvCacheConfig config = p.kv_config;
  config.max_model_len = l;
  EXPECT_GE(PlanKvCapacity(config, 3 * kGiB)->max_concurrency, 7.0);
  config.max_model_len = l + 1;
  EXPECT_LT(PlanKvCapacity(config, 3 * kGiB)->max_concurrency, 7.0);
}

TEST(Options, BadValuesAreErrors) {
  const ModelDesc model = *LoadModelPreset("llama-3.1-8b");
  const DeviceDesc device = *LoadDevicePreset("h100");
  auto fails = [&](PlanOptions o, const char* needle) {
    Result<Plan> p = MakePlan(model, device, o);
    ASSERT_FALSE(p.ok()) << needle;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  PlanOptions o;
  o.cpu_offload_parts = {"engram"};
  fails(o, "--cpu-offload-weights engram");
  o = {};
  o.cpu_offload_parts = {"sharded"};
  fails(o, "cannot live in CPU memory");
  o = {};
  o.num_gpus = 6;
  o.tp = 4;
  fails(o, "not a multiple");
  o = {};
  o.gpu_memory_utilization = 1.5;
  fails(o, "--gpu-memory-utilization");
  o = {};
  o.num_gpus = 3;  // 8 KV heads over 3 ranks
  fails(o, "cannot be split");
  o = {};
  o.kv_cache_dtype = "int3";
  fails(o, "--kv-cache-dtype");
  o = {};
  o.block_size = 24;
  fails(o, "--block-size");
}

TEST(Options, KvCacheDtypeAppliesOnlyToUntrainedFormats) {
  PlanOptions o;
  o.kv_cache_memory_bytes = 4 * kGiB;
  o.max_model_len = 4096;
  o.kv_cache_dtype = "fp8";
  const Plan llama = MustPlan("llama-3.1-8b", "h100", o);
  EXPECT_DOUBLE_EQ(llama.growing_bytes_per_token, 2 * 32 * 1056.0);  // 1024 values in 33 B blocks
  const Plan v4 = MustPlan("deepseek-v4.1-flash", "h100", o);
  EXPECT_DOUBLE_EQ(v4.growing_bytes_per_token, 890.0);
}

TEST(CpuTier, SplitsOverRanks) {
  PlanOptions o = SeedOptions();
  o.kv_offloading_bytes = 8 * kGiB;  // the seed's validated 8 GiB CPU tier
  o.max_model_len = 16384;
  o.max_num_seqs = 16;
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", o);
  EXPECT_EQ(p.cpu_kv_tier_bytes, 8 * kGiB);
  EXPECT_EQ(p.cpu_kv_tier_tokens, static_cast<int64_t>(2.0 * kGiB / 890));
  EXPECT_EQ(p.cpu_total_bytes, p.cpu_weight_bytes + 8 * kGiB);
}

TEST(Report, JsonParsesAndCarriesTheNumbers) {
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", SeedOptions());
  const nlohmann::json j = nlohmann::json::parse(PlanToJson(p).dump());
  EXPECT_EQ(j["model"], "deepseek-v4.1-flash");
  EXPECT_EQ(j["device_weight_bytes"].get<uint64_t>(), p.device_weight_bytes);
  EXPECT_EQ(j["kv_pool_bytes"].get<int64_t>(), p.kv_pool_bytes);
  EXPECT_EQ(j["bytes_per_token"].get<double>(), 890.0);
  EXPECT_EQ(j["kv_groups"].size(), 3u);
  EXPECT_EQ(j["kv_tokens"].get<int64_t>(), p.capacity.num_tokens);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(Report, TextAndSvg) {
  const Plan p = MustPlan("deepseek-v4.1-flash", "h200", SeedOptions());
  const std::string text = FormatPlanText(p);
  for (const char* needle :
       {"resident weights per device", "81.20 GiB", "copy on every rank", "-> CPU memory", "890 B",
        "46.", "2.07 KB", "replicated on every TP rank", "Fixed per-sequence", "CPU memory"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
  const std::string svg = PlanToSvg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("CPU memory"), std::string::npos);
  size_t bars = 0;
  for (size_t pos = svg.find(">h200 "); pos != std::string::npos;
       pos = svg.find(">h200 ", pos + 1)) {
    ++bars;
  }
  EXPECT_EQ(bars, 4u);
}

}  // namespace
}  // namespace kvserve::planner
