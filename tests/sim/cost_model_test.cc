// The cost model's FLOP and byte counts against values computed by hand (the arithmetic is in
// each comment), for a llama layer, a sliding-window layer and a latent layer, plus the step
// sum over ops and the device presets' parsing.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gguf/gguf.h"
#include "planner/plan.h"
#include "planner/presets.h"
#include "sim/hardware.h"
#include "sim/model_compute.h"

namespace kvserve::sim {
namespace {

using tensor::DType;

const Matrix& Find(const ModelCompute& m, std::string_view name) {
  for (const Matrix& x : m.matrices) {
    if (x.name == name) return x;
  }
  ADD_FAILURE() << "no matrix " << name;
  static Matrix none;
  return none;
}

TEST(CostModel, LlamaLayer) {
  Result<ModelCompute> llama = LoadComputePreset("llama-3.1-8b");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  // Attention projections: q, o 4096 x 4096, k, v 4096 x 1024 = 41,943,040 params, bf16.
  const Matrix& attn = Find(*llama, "attention");
  EXPECT_EQ(attn.num_layers, 32);
  const Work decode = MatrixWork(attn, 1, 1);
  EXPECT_DOUBLE_EQ(decode.flops, 2.0 * 41943040);  // 83,886,080
  EXPECT_DOUBLE_EQ(decode.bytes, 2.0 * 41943040);  // 2 B per bf16 weight
  const Work chunk = MatrixWork(attn, 512, 2);     // TP 2: half the matrix per rank
  EXPECT_DOUBLE_EQ(chunk.flops, 2.0 * 512 * 41943040 / 2);
  EXPECT_DOUBLE_EQ(chunk.bytes, 41943040.0);
  // Attention over the full group: 8 KV heads x 128 dims, bf16: one token's K and V rows are
  // 2 x 8 x 128 x 2 B = 4096 B. One rank (tp 1) has all 32 query heads.
  const kv::KvLayoutSpec full = kv::FullAttention{8, 128, DType::kBF16};
  const AttentionHeads heads{32, 0, 0};
  // A decode at context 1000 (position 1000): 1001 keys.
  const Work d = AttentionWork(full, heads, 1000, 1);
  EXPECT_DOUBLE_EQ(d.flops, 4.0 * 128 * 32 * 1001);  // 16,400,384
  EXPECT_DOUBLE_EQ(d.bytes, 1001.0 * 4096);          // 4,100,096
  // A 512-token prefill chunk from 0: 1 + 2 + ... + 512 = 131,328 query-key pairs.
  const Work p = AttentionWork(full, heads, 0, 512);
  EXPECT_DOUBLE_EQ(p.flops, 4.0 * 128 * 32 * 131328);
  EXPECT_DOUBLE_EQ(p.bytes, 512.0 * 4096);
  // A second chunk of 512 after 512: 512 x 512 + 131,328 = 393,472 pairs; 1024 rows read.
  const Work p2 = AttentionWork(full, heads, 512, 512);
  EXPECT_DOUBLE_EQ(p2.flops, 4.0 * 128 * 32 * 393472);
  EXPECT_DOUBLE_EQ(p2.bytes, 1024.0 * 4096);
}

TEST(CostModel, SlidingLayer) {
  // Gemma-3-style local layer: window 1024, 16 KV heads x 128, bf16 (8192 B per token), 32
  // query heads.
  const kv::KvLayoutSpec sliding = kv::SlidingWindow{1024, 16, 128, DType::kBF16};
  const AttentionHeads heads{32, 0, 0};
  // 100 tokens after 2000: every query sees the full window, 100 x 1024 pairs; the rows read
  // are positions 977 .. 2099 = 1023 + 100 = 1123.
  const Work w = AttentionWork(sliding, heads, 2000, 100);
  EXPECT_DOUBLE_EQ(w.flops, 4.0 * 128 * 32 * 102400);
  EXPECT_DOUBLE_EQ(w.bytes, 1123.0 * 8192);
  // A small window across its edge: window 4, 10 tokens from 0: 1 + 2 + 3 + 4 x 7 = 34 pairs;
  // every one of the 10 rows is read (min(10, 3 + 10)).
  const kv::KvLayoutSpec small = kv::SlidingWindow{4, 1, 64, DType::kF16};
  const Work s = AttentionWork(small, AttentionHeads{2, 0, 0}, 0, 10);
  EXPECT_DOUBLE_EQ(s.flops, 4.0 * 64 * 2 * 34);
  EXPECT_DOUBLE_EQ(s.bytes, 10.0 * 2 * 64 * 2);
  // A decode far past the window reads window rows only: min(5001, 3 + 1) = 4.
  const Work d = AttentionWork(small, AttentionHeads{2, 0, 0}, 5000, 1);
  EXPECT_DOUBLE_EQ(d.flops, 4.0 * 64 * 2 * 4);
  EXPECT_DOUBLE_EQ(d.bytes, 4.0 * 256);
}

TEST(CostModel, LatentLayer) {
  // DeepSeek-V4.1 latent/2: one entry per 2 tokens, 512-dim FP4 E2M1 + E4M3/16 (288 B) and a
  // 128-dim FP4 + E8M0/32 indexer key (68 B); 64 query heads, indexer 32 heads, top 512.
  const kv::KvLayoutSpec latent =
      kv::CompressedLatent{512, 2, 128, DType::kFP4_E2M1_E4M3_16, DType::kFP4_E2M1_E8M0_32};
  const AttentionHeads heads{64, 32, 512};
  // A decode at position 10000 sees (10000 + 1) / 2 = 5000 complete entries; it reads the top
  // 512: 4 x 512 x 64 x 512 = 67,108,864 FLOPs and 512 x 288 B; the indexer scores all 5000:
  // 2 x 128 x 32 x 5000 = 40,960,000 FLOPs, reading 5000 x 68 B of keys.
  const Work d = AttentionWork(latent, heads, 10000, 1);
  EXPECT_DOUBLE_EQ(d.flops, 67108864.0);
  EXPECT_DOUBLE_EQ(d.bytes, 512.0 * 288);
  const Work di = IndexerWork(latent, heads, 10000, 1);
  EXPECT_DOUBLE_EQ(di.flops, 40960000.0);
  EXPECT_DOUBLE_EQ(di.bytes, 5000.0 * 68);
  // 8 tokens from 0: entries visible per query (x = 1..8, x / 2) 0,1,1,2,2,3,3,4 = 16, all
  // under top_k; the last query sees 4 entries, so 4 latent rows and 4 keys are read.
  const Work p = AttentionWork(latent, heads, 0, 8);
  EXPECT_DOUBLE_EQ(p.flops, 4.0 * 512 * 64 * 16);
  EXPECT_DOUBLE_EQ(p.bytes, 4.0 * 288);
  EXPECT_DOUBLE_EQ(IndexerWork(latent, heads, 0, 8).flops, 2.0 * 128 * 32 * 16);
  EXPECT_DOUBLE_EQ(IndexerWork(latent, heads, 0, 8).bytes, 4.0 * 68);
  // A chunk of 1024 from 4000 (ratio 2): each query selects min(512, x / 2) = 512 (x >= 4001);
  // the indexer scores sum_{x=4001}^{5024} floor(x / 2) = 2000 + 2 x (2001 + ... + 2511) +
  // 2512 = 2,310,144 (the closed form in the model; summed here); rows read: min(2512
  // entries, 512 x 1024) = 2512.
  double scored = 0;
  for (int x = 4001; x <= 5024; ++x) scored += x / 2;
  EXPECT_DOUBLE_EQ(scored, 2310144.0);
  const Work c = AttentionWork(latent, heads, 4000, 1024);
  EXPECT_DOUBLE_EQ(c.flops, 4.0 * 512 * 64 * 512 * 1024);
  EXPECT_DOUBLE_EQ(c.bytes, 2512.0 * 288);
  EXPECT_DOUBLE_EQ(IndexerWork(latent, heads, 4000, 1024).flops, 2.0 * 128 * 32 * scored);
  EXPECT_DOUBLE_EQ(IndexerWork(latent, heads, 4000, 1024).bytes, 2512.0 * 68);
  // Without an indexer (DeepSeek-V3 MLA: 576-dim bf16 latent, ratio 1) every entry is read.
  const kv::KvLayoutSpec mla = kv::CompressedLatent{576, 1, 0, DType::kBF16, DType::kBF16};
  const Work m = AttentionWork(mla, AttentionHeads{128, 0, 0}, 99, 1);
  EXPECT_DOUBLE_EQ(m.flops, 4.0 * 576 * 128 * 100);
  EXPECT_DOUBLE_EQ(m.bytes, 100.0 * 576 * 2);
  EXPECT_DOUBLE_EQ(IndexerWork(mla, AttentionHeads{128, 0, 0}, 99, 1).flops, 0.0);
}

TEST(CostModel, RoutedExpertsReadTheExpertsTheirTokensTouch) {
  Matrix experts{"experts", 1, 1000, 1000, "fp8"};
  experts.num_experts = 8;
  experts.experts_per_token = 2;
  const Work one = MatrixWork(experts, 1, 1);
  EXPECT_DOUBLE_EQ(one.flops, 2.0 * 2 * 1000);
  EXPECT_DOUBLE_EQ(one.bytes, 2.0 * 1000);  // 8 x (1 - 6/8) = 2 experts
  const Work two = MatrixWork(experts, 2, 1);
  EXPECT_DOUBLE_EQ(two.bytes, 8.0 * (1 - 0.75 * 0.75) * 1000);  // 3.5 experts on average
}

// A made-up device with round numbers, so the step time can be summed by hand.
HardwareProfile RoundDevice() {
  HardwareProfile h;
  h.name = "round";
  h.peak_flops["bf16"] = 1e12;
  h.memory_bandwidth = 1e11;
  h.link_bandwidth = 1e10;
  h.link_latency = 1e-5;
  h.step_overhead = 1e-3;
  h.sequence_overhead = 1e-5;
  return h;
}

TEST(CostModel, StepIsTheSumOverOpsOfTheSlowerOfComputeAndBytes) {
  ModelCompute m;
  m.name = "toy";
  m.num_layers = 2;
  m.hidden_size = 64;
  m.vocab_size = 1000;
  m.num_q_heads = 4;
  m.matrices = {Matrix{"w", 2, 1e6, 2e6, "bf16"}};
  kv::KvCacheConfig kv;
  kv.num_layers = 2;
  kv.groups.push_back({kv::FullAttention{1, 16, DType::kF16}, {0, 1}, {}});
  Result<CostModel> model = CostModel::Create(m, kv, RoundDevice(), 2);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const SequenceWork batch[] = {{0, 100, true}, {50, 1, true}};
  const StepCost cost = model->Cost(batch);
  // gemm: 101 rows x 2 x 1e6 / 2 ranks = 1.01e8 FLOPs -> 1.01e-4 s; 1e6 bytes -> 1e-5 s.
  // Two layers: 2.02e-4 s.
  EXPECT_DOUBLE_EQ(cost.seconds_by[0], 2 * std::max(1.01e8 / 1e12, 1e6 / 1e11));
  // attention, 2 heads per rank, 64 B per token: seq 1: 5050 pairs -> 4 x 16 x 2 x 5050 FLOPs,
  // 100 rows; seq 2: 51 pairs, 51 rows. Each max(), summed, times 2 layers.
  const double a1 = std::max(4.0 * 16 * 2 * 5050 / 1e12, 100.0 * 64 / 1e11);
  const double a2 = std::max(4.0 * 16 * 2 * 51 / 1e12, 51.0 * 64 / 1e11);
  EXPECT_DOUBLE_EQ(cost.seconds_by[1], 2 * (a1 + a2));
  // sampling: 2 x 1000 logits x 16 B at 1e11 B/s.
  EXPECT_DOUBLE_EQ(cost.seconds_by[2], 2 * 1000 * 16 / 1e11);
  // all-reduce: 2 per layer x 2 layers, each 101 x 64 x 2 B, ring moves 2 (2-1)/2 of it.
  EXPECT_DOUBLE_EQ(cost.seconds_by[3], 4 * (1e-5 + 101.0 * 64 * 2 / 1e10));
  EXPECT_DOUBLE_EQ(cost.seconds_by[4], 1e-3 + 2 * 1e-5);
  // The engine's own work (calibrated): per step, per sequence and per token, on top.
  HardwareProfile with_engine = RoundDevice();
  with_engine.engine_step_overhead = 2e-4;
  with_engine.engine_sequence_overhead = 3e-6;
  with_engine.engine_token_overhead = 1e-7;
  const StepCost engine = CostModel::Create(m, kv, with_engine, 2)->Cost(batch);
  EXPECT_DOUBLE_EQ(engine.seconds_by[4], 1e-3 + 2e-4 + 2 * (1e-5 + 3e-6) + 101 * 1e-7);
  EXPECT_DOUBLE_EQ(engine.seconds - cost.seconds, 2e-4 + 2 * 3e-6 + 101 * 1e-7);
  double sum = 0;
  for (double s : cost.seconds_by) sum += s;
  EXPECT_DOUBLE_EQ(cost.seconds, sum);
}

// The footprint term: the step's KV bytes beyond cached_kv_bytes cost 1 / kv_spill_bandwidth
// seconds each, on top of the per-sequence attention times; a step within the caches pays none.
TEST(CostModel, KvBeyondTheCachesCostsTheSpillRate) {
  ModelCompute m;
  m.name = "toy";
  m.num_layers = 2;
  m.hidden_size = 64;
  m.vocab_size = 1000;
  m.num_q_heads = 2;
  kv::KvCacheConfig kv;
  kv.num_layers = 2;
  kv.groups.push_back({kv::FullAttention{1, 16, DType::kF16}, {0, 1}, {}});
  HardwareProfile h = RoundDevice();
  const CostModel plain = *CostModel::Create(m, kv, h, 1);
  h.cached_kv_bytes = 10000;
  h.kv_spill_bandwidth = 1e9;
  const CostModel spill = *CostModel::Create(m, kv, h, 1);
  // A K and a V row of 16 f16 values: 64 B per token per layer. Sequences at 100 (prefill of
  // 100) and 51 tokens (decode at 50): (100 + 51) x 64 B x 2 layers = 19328 B, 9328 B beyond.
  const SequenceWork big[] = {{0, 100, true}, {50, 1, true}};
  EXPECT_DOUBLE_EQ(spill.Cost(big).work[1].bytes, 19328.0);
  EXPECT_DOUBLE_EQ(KvSpillSeconds(h, 19328.0), 9328.0 / 1e9);
  EXPECT_DOUBLE_EQ(spill.Cost(big).seconds_by[1], plain.Cost(big).seconds_by[1] + 9328.0 / 1e9);
  EXPECT_DOUBLE_EQ(spill.Cost(big).seconds, plain.Cost(big).seconds + 9328.0 / 1e9);
  // The decode alone: 51 x 64 x 2 = 6528 B, within the caches.
  const SequenceWork small[] = {{50, 1, true}};
  EXPECT_DOUBLE_EQ(spill.Cost(small).seconds, plain.Cost(small).seconds);
  EXPECT_DOUBLE_EQ(KvSpillSeconds(RoundDevice(), 1e12), 0.0);  // no spill rate: no term
  // Two decodes at 99 whose first 64 tokens are the same blocks (a shared prefix): 2 x 100 x
  // 64 B x 2 layers = 25600 B read, of which 64 x 64 x 2 = 8192 B twice: 17408 B distinct,
  // 7408 B beyond.
  const SequenceWork shared[] = {{99, 1, true, 0}, {99, 1, true, 64}};
  const SequenceWork apart[] = {{99, 1, true, 0}, {99, 1, true, 0}};
  EXPECT_DOUBLE_EQ(spill.Cost(shared).work[1].bytes, 25600.0);
  EXPECT_DOUBLE_EQ(spill.Cost(shared).seconds_by[1],
                   plain.Cost(shared).seconds_by[1] + 7408.0 / 1e9);
  EXPECT_DOUBLE_EQ(spill.Cost(apart).seconds_by[1],
                   plain.Cost(apart).seconds_by[1] + 15600.0 / 1e9);
}

TEST(CostModel, SharedKvBytesAreTheSharedRowsEachSpecReads) {
  const AttentionHeads heads{2, 0, 0};
  // Full, 64 B rows: a decode at 99 reads rows 0..99; 64 of them shared.
  const kv::KvLayoutSpec full = kv::FullAttention{1, 16, DType::kF16};
  EXPECT_DOUBLE_EQ(SharedKvBytes(full, heads, 99, 1, 64), 64.0 * 64);
  EXPECT_DOUBLE_EQ(SharedKvBytes(full, heads, 99, 1, 500), 100.0 * 64);  // at most its rows
  // Sliding, window 8: the decode reads rows 92..99; of the first 96 tokens, rows 92..95.
  const kv::KvLayoutSpec sliding = kv::SlidingWindow{8, 1, 16, DType::kF16};
  EXPECT_DOUBLE_EQ(SharedKvBytes(sliding, heads, 99, 1, 96), 4.0 * 64);
  EXPECT_DOUBLE_EQ(SharedKvBytes(sliding, heads, 99, 1, 64), 0.0);
}

TEST(Hardware, DevicePresetsWithComputeParse) {
  for (const char* name : {"h200", "h100", "b200", "a100-80gb", "l40s", "rtx4090"}) {
    Result<HardwareProfile> h = LoadDeviceProfile(name);
    ASSERT_TRUE(h.ok()) << name << ": " << h.status().ToString();
    EXPECT_GT(h->memory_bandwidth, 0) << name;
    EXPECT_TRUE(h->GemmFlops("bf16").ok()) << name;
    EXPECT_GT(h->cpu_tier.bandwidth, 0) << name;
  }
  const HardwareProfile h200 = *LoadDeviceProfile("h200");
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(*h200.GemmFlops("fp8_e4m3_e8m0_32"), 1978.9e12 * 0.7);
  EXPECT_DOUBLE_EQ(*h200.GemmFlops("fp4_e2m1_e8m0_32"), 1978.9e12 * 0.7);  // Hopper: no FP4
  EXPECT_DOUBLE_EQ(*h200.GemmFlops("q8_0"), 989.4e12 * 0.7);               // dequant to bf16
  EXPECT_DOUBLE_EQ(h200.cpu_tier.bandwidth, 64e9 * 0.8);
  Result<HardwareProfile> cpu = LoadDeviceProfile("cpu");
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("--calibrate"), std::string::npos);
  EXPECT_FALSE(LoadDeviceProfile("tpu").ok());
}

TEST(Hardware, BadProfilesAreErrorsNamingTheField) {
  EXPECT_FALSE(ParseHardwareProfile("{}", "x").ok());
  EXPECT_FALSE(ParseHardwareProfile("not json", "x").ok());
  Result<HardwareProfile> eff = ParseHardwareProfile(
      R"({"peak_flops": {"bf16": 1e12}, "memory_bandwidth": 1e11, "efficiency": {"gemm": 1.5}})",
      "x");
  ASSERT_FALSE(eff.ok());
  EXPECT_NE(eff.status().message().find("gemm"), std::string::npos);
  Result<HardwareProfile> neg = ParseHardwareProfile(
      R"({"peak_flops": {"bf16": 1e12}, "memory_bandwidth": -1})", "x");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("memory_bandwidth"), std::string::npos);
  // Round trip through the writer.
  HardwareProfile h = RoundDevice();
  h.cpu_tier = {1e9, 1e-4};
  h.cached_kv_bytes = 8e6;
  h.kv_spill_bandwidth = 3e9;
  Result<HardwareProfile> back = ParseHardwareProfile(ProfileToJson(h), "round");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->memory_bandwidth, h.memory_bandwidth);
  EXPECT_DOUBLE_EQ(back->cpu_tier.latency, 1e-4);
  EXPECT_DOUBLE_EQ(back->cached_kv_bytes, 8e6);
  EXPECT_DOUBLE_EQ(back->kv_spill_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(*back->GemmFlops("bf16"), 1e12);
}

TEST(ModelCompute, EveryModelPresetHasMatricesThatMatchItsWeights) {
  for (const std::string& name : planner::ModelPresetNames()) {
    Result<ModelCompute> m = LoadComputePreset(name);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().ToString();
    Result<planner::ModelDesc> desc = planner::LoadModelPreset(name);
    ASSERT_TRUE(desc.ok());
    // The matrices' bytes are the weights the planner places (less the embedding lookup,
    // norms and, for V4.1, the Engram tables): within 10% of (total - Engram - embedding).
    double expected = static_cast<double>(desc->total_weight_bytes);
    if (const planner::WeightPart* engram = desc->FindPart("engram")) expected -= engram->bytes;
    const Matrix& head = m->matrices.back();
    EXPECT_TRUE(head.logits_only) << name;
    const bool tied = name == "gemma-3-27b";
    if (!tied) expected -= head.bytes;  // the embedding table, same size as the head
    EXPECT_NEAR(m->TotalWeightBytes() / expected, 1.0, 0.1) << name;
  }
  // DeepSeek-V4.1-Flash: ~8.4B parameters per token (the seed: 8B).
  EXPECT_NEAR(LoadComputePreset("deepseek-v4.1-flash")->ActiveParamsPerToken() / 1e9, 8.4, 0.1);
  EXPECT_NEAR(LoadComputePreset("llama-3.1-8b")->ActiveParamsPerToken() / 1e9, 7.5, 0.1);
}

}  // namespace
}  // namespace kvserve::sim

namespace kvserve::sim {
namespace {

TEST(ModelCompute, FromAGgufTensorTable) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  if (!file.ok()) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf: " << file.status().ToString();
  Result<ModelCompute> m = ComputeFromGguf(**file);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // stories260K: 5 layers, dim 64, 8 heads (4 KV heads), hidden 172, vocab 512.
  EXPECT_EQ(m->num_layers, 5);
  EXPECT_EQ(m->hidden_size, 64);
  EXPECT_EQ(m->vocab_size, 512);
  EXPECT_EQ(m->num_q_heads, 8);
  double per_token = 0;
  int heads = 0;
  for (const Matrix& x : m->matrices) {
    if (x.logits_only) {
      ++heads;
      EXPECT_EQ(x.params, 512.0 * 64);
    }
    if (x.name == "attn_q") {
      EXPECT_EQ(x.params, 64 * 64);
    } else if (x.name == "attn_k") {
      EXPECT_EQ(x.params, 64 * 32);
    } else if (x.name == "ffn_up") {
      EXPECT_EQ(x.params, 64 * 172);
    }
    if (!x.logits_only) {
      EXPECT_EQ(x.num_layers, 5) << x.name;
      per_token += x.params * x.num_layers;
    }
  }
  // q, o 64x64; k, v 64x32; gate, up, down 3 x 64x172: per layer 45,312 params.
  EXPECT_EQ(per_token, 5.0 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172));
  EXPECT_EQ(heads, 1);  // output.weight, or the tied embedding
}

}  // namespace
}  // namespace kvserve::sim
