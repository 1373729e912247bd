// MeasureEngineOverhead and FitEngineOverhead (sim/calibrate.h): the engine's own work per
// step, timed on the real engine::Engine.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "sim/calibrate.h"

namespace kvserve::sim {
namespace {

// Runs the real model and adds up the time its Forward calls take (on the calibration clock),
// remembering the last batch's shape.
class TimedModel final : public model::Model {
 public:
  TimedModel(std::unique_ptr<model::Model> inner, int threads)
      : inner_(std::move(inner)), threads_(threads) {}
  std::string_view architecture() const override { return inner_->architecture(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  void Forward(const model::Batch& batch, const model::KvViews& kv, ThreadPool& pool,
               float* logits) override {
    shape_.clear();
    for (const model::SequenceInput& s : batch.sequences) {
      shape_.push_back({s.start_pos, static_cast<int64_t>(s.tokens.size()), s.num_logits > 0});
    }
    const double start = CalibrationSeconds(threads_);
    inner_->Forward(batch, kv, pool, logits);
    forward_ += CalibrationSeconds(threads_) - start;
  }
  // Forward seconds since the last call; the shape of the last Forward.
  double TakeForwardSeconds() { return std::exchange(forward_, 0.0); }
  const std::vector<SequenceWork>& shape() const { return shape_; }

 private:
  std::unique_ptr<model::Model> inner_;
  int threads_;
  double forward_ = 0;
  std::vector<SequenceWork> shape_;
};

// Drives the engine (which owns `model`) through the probe shapes, one Engine::Step at a time,
// on the calibrating thread. Owns a pool and samplers of its own for SampleRows.
class Probe {
 public:
  Probe(engine::Engine& engine, TimedModel& model, const CostModel& cost, int threads)
      : engine_(engine), model_(model), cost_(cost), threads_(threads), pool_(threads),
        samplers_(static_cast<size_t>(threads),
                  sampling::Sampler(static_cast<int32_t>(model.vocab_size()))) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    logits_.resize(static_cast<size_t>(64 * model.vocab_size()));
    for (float& x : logits_) x = normal(rng_);
  }

  // Adds `count` requests of `prompt_len` fresh random tokens (no prefix hits), each generating
  // `max_tokens` tokens (ignoring EOS, temperature 1: as `bench throughput`).
  Status Add(int count, int prompt_len, int max_tokens) {
    for (int i = 0; i < count; ++i) {
      engine::EngineRequest r;
      for (int t = 0; t < prompt_len; ++t) {
        r.prompt.push_back(
            static_cast<int32_t>(rng_() % static_cast<uint64_t>(model_.vocab_size())));
      }
      r.params.temperature = 1.0f;
      r.params.ignore_eos = true;
      r.params.max_tokens = max_tokens;
      r.params.seed = rng_();
      KV_RETURN_IF_ERROR(engine_.AddRequest(std::move(r)).status());
    }
    return Status::Ok();
  }

  // One Engine::Step: its time, the forward pass's, the sampler work the grid times with a
  // shape (SampleRows on as many rows, right after the step), and the profile's prediction.
  struct Timed {
    double step = 0, forward = 0, sampler = 0, fitted = 0;
    std::vector<SequenceWork> shape;
  };
  Timed Step() {
    model_.TakeForwardSeconds();
    const double start = CalibrationSeconds(threads_);
    (void)engine_.Step();
    Timed t;
    t.step = CalibrationSeconds(threads_) - start;
    t.forward = model_.TakeForwardSeconds();
    t.shape = model_.shape();
    int64_t rows = 0;
    for (const SequenceWork& w : t.shape) rows += w.sampled ? 1 : 0;
    rows = std::min<int64_t>(rows, 64);  // the probes sample at most 64 rows
    const int32_t history[] = {1};
    const double sample_start = CalibrationSeconds(threads_);
    SampleRows(pool_, samplers_, logits_.data(), rows, model_.vocab_size(), history);
    t.sampler = CalibrationSeconds(threads_) - sample_start;
    t.fitted = cost_.Cost(t.shape).seconds;
    return t;
  }

  // Median extra time of the decode steps of `batch` sequences after `prompt_len`-token
  // prompts (the first `warm` decode steps skipped).
  Result<EngineOverheadPoint> Decode(int batch, int prompt_len, int warm, int timed) {
    KV_RETURN_IF_ERROR(Add(batch, prompt_len, 1 + warm + timed));
    std::vector<Timed> runs;
    int decodes = 0;
    while (engine_.HasUnfinished()) {
      Timed t = Step();
      const bool pure_decode =
          static_cast<int>(t.shape.size()) == batch &&
          std::all_of(t.shape.begin(), t.shape.end(),
                      [](const SequenceWork& w) { return w.num_new_tokens == 1 && w.sampled; });
      if (pure_decode && decodes++ >= warm) runs.push_back(std::move(t));
    }
    return Summarize(fmt::format("decode {} x @ {}", batch, prompt_len), runs);
  }

  // Median extra time of the step that admits `count` fresh prompts of `prompt_len` tokens
  // (each generates one token and finishes in that step), over `repeats` admissions.
  Result<EngineOverheadPoint> Admit(int count, int prompt_len, int repeats) {
    std::vector<Timed> runs;
    for (int r = 0; r <= repeats; ++r) {
      KV_RETURN_IF_ERROR(Add(count, prompt_len, 1));
      Timed t = Step();
      if (engine_.HasUnfinished()) {
        return Internal(
            fmt::format("{} prompts of {} tokens did not fit one step", count, prompt_len));
      }
      if (r > 0) runs.push_back(std::move(t));  // the first warms up
    }
    return Summarize(fmt::format("admit {} x {}", count, prompt_len), runs);
  }

 private:
  static Result<EngineOverheadPoint> Summarize(std::string label, std::vector<Timed> runs) {
    if (runs.empty()) return Internal(fmt::format("engine overhead: no step of {}", label));
    auto extra = [](const Timed& t) { return t.step - t.forward - t.sampler; };
    std::sort(runs.begin(), runs.end(),
              [&](const Timed& a, const Timed& b) { return extra(a) < extra(b); });
    const Timed& median = runs[runs.size() / 2];
    EngineOverheadPoint p;
    p.label = std::move(label);
    p.sequences = static_cast<int64_t>(median.shape.size());
    for (const SequenceWork& w : median.shape) p.tokens += w.num_new_tokens;
    p.step = median.step;
    p.forward = median.forward;
    p.sampler = median.sampler;
    p.fitted = median.fitted;
    p.extra = extra(median);
    return p;
  }

  engine::Engine& engine_;
  TimedModel& model_;
  const CostModel& cost_;
  int threads_;
  ThreadPool pool_;  // for SampleRows, as the grid samples
  std::vector<sampling::Sampler> samplers_;
  std::vector<float> logits_;  // 64 rows of random logits
  std::mt19937_64 rng_{7};
};

// Least squares of y ~ X b over the columns in `use` (others 0); false when singular.
bool SolveSubset(const std::vector<std::array<double, 3>>& x, const std::vector<double>& y,
                 const std::array<bool, 3>& use, std::array<double, 3>& b) {
  std::vector<int> cols;
  for (int k = 0; k < 3; ++k) {
    if (use[k]) cols.push_back(k);
  }
  const size_t n = cols.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));  // [A | rhs]
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < n; ++c) a[r][c] += x[i][cols[r]] * x[i][cols[c]];
      a[r][n] += x[i][cols[r]] * y[i];
    }
  }
  for (size_t p = 0; p < n; ++p) {  // Gauss-Jordan with partial pivoting
    size_t pivot = p;
    for (size_t r = p + 1; r < n; ++r) {
      if (std::abs(a[r][p]) > std::abs(a[pivot][p])) pivot = r;
    }
    if (std::abs(a[pivot][p]) < 1e-300) return false;
    std::swap(a[p], a[pivot]);
    for (size_t r = 0; r < n; ++r) {
      if (r == p) continue;
      const double f = a[r][p] / a[p][p];
      for (size_t c = p; c <= n; ++c) a[r][c] -= f * a[p][c];
    }
  }
  b = {0, 0, 0};
  for (size_t r = 0; r < n; ++r) b[cols[r]] = a[r][n] / a[r][r];
  return true;
}

}  // namespace

void FitEngineOverhead(EngineOverhead& o) {
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  for (const EngineOverheadPoint& p : o.points) {
    x.push_back({1.0, static_cast<double>(p.sequences), static_cast<double>(p.tokens)});
    y.push_back(p.extra);
  }
  // Non-negative least squares over three columns: the best of the 7 subsets whose
  // unconstrained solution is non-negative (all zero when none is).
  std::array<double, 3> best{0, 0, 0};
  double best_sse = std::numeric_limits<double>::infinity();
  for (int mask = 0; mask < 8; ++mask) {
    const std::array<bool, 3> use = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    std::array<double, 3> b{0, 0, 0};
    if (mask != 0 && !SolveSubset(x, y, use, b)) continue;
    if (std::any_of(b.begin(), b.end(), [](double v) { return v < 0; })) continue;
    double sse = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = b[0] + b[1] * x[i][1] + b[2] * x[i][2] - y[i];
      sse += e * e;
    }
    if (sse < best_sse) {
      best_sse = sse;
      best = b;
    }
  }
  o.step = best[0];
  o.sequence = best[1];
  o.token = best[2];
  for (EngineOverheadPoint& p : o.points) {
    p.predicted = o.step + o.sequence * static_cast<double>(p.sequences) +
                  o.token * static_cast<double>(p.tokens);
  }
}

Result<EngineOverhead> MeasureEngineOverhead(std::unique_ptr<model::Model> model,
                                             const kv::KvCacheConfig& layout,
                                             const kv::KvCacheManagerOptions& kv_options,
                                             const engine::EngineConfig& config,
                                             const CostModel& cost, bool quick) {
  const int threads = config.NumThreads();
  auto timed = std::make_unique<TimedModel>(std::move(model), threads);
  TimedModel& timed_model = *timed;
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::Engine> engine,
      engine::Engine::Create(std::move(timed), layout, kv_options, config, std::nullopt));
  Probe probe(*engine, timed_model, cost, threads);
  EngineOverhead o;
  const int prompt = quick ? 8 : 96;
  const int timed_steps = quick ? 2 : 9;
  for (int batch : quick ? std::vector<int>{1, 4} : std::vector<int>{1, 4, 16, 64}) {
    KV_ASSIGN_OR_RETURN(EngineOverheadPoint p, probe.Decode(batch, prompt, 2, timed_steps));
    o.points.push_back(std::move(p));
  }
  const std::vector<std::pair<int, int>> admissions =
      quick ? std::vector<std::pair<int, int>>{{2, 16}}
            : std::vector<std::pair<int, int>>{{1, 512}, {8, 128}, {32, 32}};
  for (const auto& [count, len] : admissions) {
    KV_ASSIGN_OR_RETURN(EngineOverheadPoint p, probe.Admit(count, len, quick ? 2 : 7));
    o.points.push_back(std::move(p));
  }
  FitEngineOverhead(o);
  return o;
}

}  // namespace kvserve::sim
