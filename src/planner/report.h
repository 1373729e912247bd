// Renderings of a Plan: a text table for people, JSON for scripts, SVG stacked bars.
// All pure functions of the Plan; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/plan.h"

namespace kvserve::planner {

// The table `kvserve plan` prints, in the seed's order: weights, runtime reserve, KV pool,
// per-group bytes per token with formulas, token capacity, concurrency, context, fixed
// per-sequence costs, CPU memory.
std::string FormatPlanText(const Plan& plan);

// Every number of the plan, bytes as integers, for scripts (`--json`).
nlohmann::json PlanToJson(const Plan& plan);

// One stacked bar per device (and one for the CPU memory of a replica when anything is
// offloaded): weights by part, reserve, KV pool, what --gpu-memory-utilization leaves free.
std::string PlanToSvg(const Plan& plan);

// "46.45M" / "1.05K" / "512": a count for people.
std::string FormatCount(double n);

}  // namespace kvserve::planner
