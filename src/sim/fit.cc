// FitProfile (sim/calibrate.h): Nelder-Mead over the logs of the profile's rates.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/check.h"
#include "sim/calibrate.h"

namespace kvserve::sim {
namespace {

constexpr int kParams = 10;
using Point = std::array<double, kParams>;

// The rates a fit moves, as logs (all positive). The GEMM rate is the same for every weight
// dtype the model has (one model is calibrated at a time).
Point ToLogs(const HardwareProfile& h, double gemm) {
  return {std::log(gemm),
          std::log(h.memory_bandwidth),
          std::log(h.attention_flops),
          std::log(h.attention_bandwidth),
          std::log(h.sampling_rate),
          std::log(h.step_overhead),
          std::log(h.sequence_overhead),
          std::log(h.token_overhead),
          std::log(h.cached_kv_bytes),
          std::log(h.kv_spill_bandwidth)};
}

// Plausible ranges for the rates (a box the fit stays in: a rate the grid does not constrain
// would otherwise drift to absurd values that later extrapolate badly).
constexpr std::array<std::pair<double, double>, kParams> kBounds = {{
    {1e8, 1e16},   // gemm FLOP/s
    {1e8, 1e13},   // memory bandwidth, bytes/s
    {1e7, 1e16},   // attention FLOP/s
    {1e8, 1e13},   // attention bandwidth
    {1e6, 1e13},   // sampling, logits/s
    {1e-7, 1.0},   // step overhead, s
    {1e-9, 1e-1},  // sequence overhead, s
    {1e-10, 1e-2}, // token overhead, s
    {1e4, 1e10},   // KV bytes that stay cached between steps
    {1e8, 1e14},   // KV spill bandwidth, bytes/s (upper end: no spill)
}};

HardwareProfile FromLogs(const Point& logs, const ModelCompute& model, HardwareProfile h) {
  Point x;
  for (int k = 0; k < kParams; ++k) {
    x[k] = std::clamp(logs[k], std::log(kBounds[k].first), std::log(kBounds[k].second));
  }
  h.peak_flops.clear();
  h.peak_flops["default"] = std::exp(x[0]);
  for (const Matrix& m : model.matrices) h.peak_flops[m.dtype] = std::exp(x[0]);
  h.memory_bandwidth = std::exp(x[1]);
  h.attention_flops = std::exp(x[2]);
  h.attention_bandwidth = std::exp(x[3]);
  h.sampling_rate = std::exp(x[4]);
  h.step_overhead = std::exp(x[5]);
  h.sequence_overhead = std::exp(x[6]);
  h.token_overhead = std::exp(x[7]);
  h.cached_kv_bytes = std::exp(x[8]);
  h.kv_spill_bandwidth = std::exp(x[9]);
  h.efficiency = Efficiency{};
  return h;
}

// Minimises f from x0 with a simplex of steps `scale` along each axis.
Point NelderMead(const std::function<double(const Point&)>& f, const Point& x0, double scale,
                 int iterations) {
  std::array<Point, kParams + 1> v;
  std::array<double, kParams + 1> fv;
  for (int i = 0; i <= kParams; ++i) {
    v[i] = x0;
    if (i > 0) v[i][i - 1] += scale;
    fv[i] = f(v[i]);
  }
  auto lerp = [](const Point& a, const Point& b, double t) {
    Point out;
    for (int k = 0; k < kParams; ++k) out[k] = a[k] + t * (b[k] - a[k]);
    return out;
  };
  for (int it = 0; it < iterations; ++it) {
    std::array<int, kParams + 1> order;
    for (int i = 0; i <= kParams; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return fv[a] < fv[b]; });
    const int best = order[0], worst = order[kParams], second = order[kParams - 1];
    Point centroid{};
    for (int i = 0; i < kParams; ++i) {
      for (int k = 0; k < kParams; ++k) centroid[k] += v[order[i]][k] / kParams;
    }
    const Point reflected = lerp(centroid, v[worst], -1.0);
    const double fr = f(reflected);
    if (fr < fv[best]) {
      const Point expanded = lerp(centroid, v[worst], -2.0);
      const double fe = f(expanded);
      v[worst] = fe < fr ? expanded : reflected;
      fv[worst] = std::min(fe, fr);
    } else if (fr < fv[second]) {
      v[worst] = reflected;
      fv[worst] = fr;
    } else {
      const Point contracted = lerp(centroid, v[worst], 0.5);
      const double fc = f(contracted);
      if (fc < fv[worst]) {
        v[worst] = contracted;
        fv[worst] = fc;
      } else {  // shrink towards the best
        for (int i = 0; i <= kParams; ++i) {
          if (i == best) continue;
          v[i] = lerp(v[best], v[i], 0.5);
          fv[i] = f(v[i]);
        }
      }
    }
  }
  return v[std::min_element(fv.begin(), fv.end()) - fv.begin()];
}

}  // namespace

HardwareProfile FitProfile(const ModelCompute& model, const kv::KvCacheConfig& kv_config,
                           const HardwareProfile& start, std::span<CalibrationPoint> points) {
  CHECK(!points.empty());
  double gemm = start.peak_flops.count("default") ? start.peak_flops.at("default") : 1e11;
  auto loss = [&](const Point& x) {
    Result<CostModel> cost = CostModel::Create(model, kv_config, FromLogs(x, model, start), 1);
    CHECK(cost.ok()) << cost.status().ToString();
    double sum = 0;
    for (const CalibrationPoint& p : points) {
      const double e = std::log(cost->Cost(p.batch).seconds / p.measured);
      sum += e * e;
    }
    return sum;
  };
  // The footprint term's knee makes the loss non-convex (a knee between two shapes fits them
  // whatever the slope): the fit starts from three knees, 2, 8 and 32 MiB (unless `start`
  // has one), and keeps the best.
  std::vector<double> knees = {2.0 * (1 << 20), 8.0 * (1 << 20), 32.0 * (1 << 20)};
  if (start.cached_kv_bytes > 0) knees = {start.cached_kv_bytes};
  Point x;
  double best = std::numeric_limits<double>::infinity();
  for (double knee : knees) {
    HardwareProfile from = start;
    from.cached_kv_bytes = knee;
    if (from.kv_spill_bandwidth <= 0) from.kv_spill_bandwidth = from.AttentionBandwidth();
    Point y = ToLogs(from, gemm);
    for (int k = 0; k < kParams; ++k) {
      y[k] = std::clamp(y[k], std::log(kBounds[k].first), std::log(kBounds[k].second));
    }
    // Restarts from the best point so far shake the simplex out of flat corners.
    for (double scale : {1.0, 0.5, 0.25, 0.1}) y = NelderMead(loss, y, scale, 600);
    if (const double l = loss(y); l < best) {
      best = l;
      x = y;
    }
  }
  HardwareProfile fitted = FromLogs(x, model, start);
  Result<CostModel> cost = CostModel::Create(model, kv_config, fitted, 1);
  CHECK(cost.ok());
  for (CalibrationPoint& p : points) p.predicted = cost->Cost(p.batch).seconds;
  return fitted;
}

}  // namespace kvserve::sim
