// Calibration: the fit recovers a profile from step times that profile produced (pure maths,
// no timing), and a quick calibration of the real stories260K model runs end to end and writes a
// profile that parses and simulates.
#include "sim/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "planner/plan.h"
#include "planner/presets.h"
#include "sim/setup.h"
#include "support/temp_path.h"

namespace kvserve::sim {
namespace {

std::vector<std::vector<SequenceWork>> Shapes() {
  std::vector<std::vector<SequenceWork>> shapes;
  for (int64_t n : {16, 64, 256, 1024, 2048}) shapes.push_back({{0, n, true}});
  shapes.push_back({{3072, 1024, true}});
  for (int64_t b : {1, 4, 16, 64}) {
    for (int64_t c : {128, 2048}) shapes.emplace_back(static_cast<size_t>(b), SequenceWork{c, 1, true});
  }
  std::vector<SequenceWork> mixed(8, SequenceWork{256, 1, true});
  mixed.push_back({0, 512, false});
  shapes.push_back(mixed);
  return shapes;
}

TEST(Calibrate, TheFitRecoversTheProfileThatMadeTheTimes) {
  const ModelCompute model = *LoadComputePreset("llama-3.1-8b");
  const planner::ModelDesc desc = *planner::LoadModelPreset("llama-3.1-8b");
  const kv::KvCacheConfig kv = *planner::PlanKvConfig(desc, 1, 16, 8192, 2048, "auto");
  HardwareProfile truth;
  truth.name = "truth";
  truth.peak_flops["bf16"] = 3e11;
  truth.memory_bandwidth = 2.5e10;
  truth.attention_flops = 6e10;
  truth.attention_bandwidth = 1.2e10;
  truth.sampling_rate = 2e8;
  truth.step_overhead = 3e-4;
  truth.sequence_overhead = 2e-5;
  truth.token_overhead = 1e-6;
  truth.cached_kv_bytes = 256e6;  // about 2,000 tokens of llama-3.1-8b's bf16 KV
  truth.kv_spill_bandwidth = 2e10;
  const CostModel made = *CostModel::Create(model, kv, truth, 1);
  std::vector<CalibrationPoint> points;
  for (const auto& shape : Shapes()) points.push_back({"", shape, made.Cost(shape).seconds, 0});
  HardwareProfile start = truth;  // every rate off by 3-10x
  start.peak_flops = {{"default", 3e10}};
  start.memory_bandwidth = 1e11;
  start.attention_flops = 1e10;
  start.attention_bandwidth = 5e10;
  start.sampling_rate = 1e9;
  start.step_overhead = 1e-3;
  start.sequence_overhead = 1e-4;
  start.token_overhead = 1e-5;
  start.cached_kv_bytes = 0;  // no footprint term: the fit starts from its three knees
  start.kv_spill_bandwidth = 0;
  const HardwareProfile fitted = FitProfile(model, kv, start, points);
  double worst = 0;
  for (const CalibrationPoint& p : points) worst = std::max(worst, std::fabs(std::log(p.predicted / p.measured)));
  EXPECT_LT(worst, 0.02);  // every point within 2%
  EXPECT_NEAR(*fitted.GemmFlops("bf16") / 3e11, 1.0, 0.05);
  EXPECT_NEAR(fitted.memory_bandwidth / 2.5e10, 1.0, 0.05);
  // The footprint term is recovered as far as the shapes pin it down: a batch bigger than any
  // shape fitted (128 decodes at 1024: 16 GiB of KV, all past the caches) is predicted.
  const std::vector<SequenceWork> held_out(128, SequenceWork{1024, 1, true});
  const double truth_s = made.Cost(held_out).seconds;
  const double fitted_s = CostModel::Create(model, kv, fitted, 1)->Cost(held_out).seconds;
  EXPECT_NEAR(fitted_s / truth_s, 1.0, 0.03);
}

TEST(Calibrate, TheEngineOverheadFitIsNonNegativeLeastSquares) {
  // Points made by 50 us per step + 4 us per sequence + 0.2 us per token: recovered exactly.
  EngineOverhead o;
  for (auto [seqs, tokens] : {std::pair{1, 1}, {16, 16}, {64, 64}, {1, 512}, {8, 1024}}) {
    EngineOverheadPoint p;
    p.sequences = seqs;
    p.tokens = tokens;
    p.extra = 50e-6 + 4e-6 * seqs + 0.2e-6 * tokens;
    o.points.push_back(p);
  }
  FitEngineOverhead(o);
  EXPECT_NEAR(o.step, 50e-6, 1e-12);
  EXPECT_NEAR(o.sequence, 4e-6, 1e-12);
  EXPECT_NEAR(o.token, 0.2e-6, 1e-12);
  for (const EngineOverheadPoint& p : o.points) EXPECT_NEAR(p.predicted, p.extra, 1e-12);
  // Extra time falling with the batch (noise): no negative per-sequence cost, the best
  // non-negative fit instead (here a constant: the mean).
  EngineOverhead falling;
  auto point = [](int64_t n, double extra) {
    EngineOverheadPoint p;
    p.sequences = p.tokens = n;
    p.extra = extra;
    return p;
  };
  falling.points = {point(1, 30e-6), point(64, 10e-6)};
  FitEngineOverhead(falling);
  EXPECT_GE(falling.sequence, 0);
  EXPECT_GE(falling.token, 0);
  EXPECT_NEAR(falling.step + falling.sequence + falling.token, 20e-6, 1e-9);
  // Nothing measurable: all zero.
  EngineOverhead none;
  none.points = {point(1, -5e-6), point(8, -1e-6)};
  FitEngineOverhead(none);
  EXPECT_EQ(none.step + none.sequence + none.token, 0);
}

TEST(Calibrate, QuickCalibrationOfARealModelWritesAUsableProfile) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf";
  CalibrationOptions o;
  o.model_path = path;
  o.engine.num_threads = 1;
  o.kv_arena_bytes = 64ull << 20;
  o.quick = true;
  Result<Calibration> c = Calibrate(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_GE(c->points.size(), 4u);
  for (const CalibrationPoint& p : c->points) {
    EXPECT_GT(p.measured, 0) << p.label;
    EXPECT_GT(p.predicted, 0) << p.label;
  }
  EXPECT_GT(c->profile.cpu_tier.bandwidth, 0);
  EXPECT_GT(c->profile.cpu_tier.store_bandwidth, 0);
  EXPECT_GT(c->profile.file_tier.bandwidth, 0);
  // The engine's own work: decode steps of 1 and 4 sequences, an admission of 2 prompts, each
  // a real Engine::Step around a real forward pass.
  ASSERT_EQ(c->engine.points.size(), 3u);
  for (const EngineOverheadPoint& p : c->engine.points) {
    EXPECT_GT(p.forward, 0) << p.label;
    EXPECT_GT(p.step, p.forward) << p.label;
  }
  EXPECT_EQ(c->engine.points[1].sequences, 4);
  EXPECT_EQ(c->engine.points[2].tokens, 2 * 16);
  EXPECT_EQ(c->profile.engine_step_overhead, c->engine.step);
  EXPECT_GE(c->engine.step + c->engine.sequence + c->engine.token, 0);
  // The written profile parses back and simulates the same model.
  const std::string file = kvserve::testing::TempPath("calibrated.json");
  std::ofstream(file) << ProfileToJson(c->profile, c->notes_json);
  SimKnobs k;
  k.model = path;
  k.profile = file;
  k.workload.num_prompts = 4;
  k.workload.input_len = 32;
  k.workload.output_len = 8;
  Result<PreparedSim> p = Prepare(k);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Result<SimResult> r = Simulate(p->setup, p->cost, p->workload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_generation_tokens, 4 * 8);
}

}  // namespace
}  // namespace kvserve::sim
