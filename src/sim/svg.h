// `kvserve simulate --format svg`: one picture of one or several simulations (a --sweep draws
// each configuration in its own colour):
//   top left      KV cache usage over time (% of blocks held by requests)
//   top right     running (solid) and waiting (dashed) requests over time
//   bottom left   TTFT CDF (log time axis)
//   bottom right  inter-token latency CDF (solid) and time per output token CDF (dashed)
// Self-contained SVG 1.1 text (no scripts, no external fonts). Pure function.
#pragma once

#include <span>
#include <string>

#include "sim/simulator.h"

namespace kvserve::sim {

struct PlotSeries {
  std::string label;         // legend text, e.g. "max-num-batched-tokens 2048"
  const SimResult* result = nullptr;
};

std::string FormatSvg(const std::string& title, std::span<const PlotSeries> series);

}  // namespace kvserve::sim
