// Workloads for the simulator: when each request arrives, how long its prompt and output are,
// which prompt prefix it shares with others, and its token ids (generated from a seed, or
// given by a trace).
//
// Synthetic (the flags of `kvserve bench throughput` and `vllm bench serve`):
//   --num-prompts N --input-len I --output-len O [--input-len-dist D --output-len-dist D]
//   --request-rate R (requests/s; default: all at t = 0) --arrivals even|poisson
//   --shared-prefix-len P [--num-prefix-groups G] --seed S
// Distributions D: "fixed" (the mean), "uniform:LO,HI" (integers, inclusive),
// "lognormal:MEAN,SIGMA" (mean in tokens, sigma of the underlying normal),
// "exponential:MEAN"; random draws are rounded and clamped so that prompt + output fits
// max-model-len (fixed lengths are not: a request too long is an error, as in serve).
// Arrivals: "even" puts request i at i / R (what `kvserve bench throughput` does), "poisson"
// draws exponential gaps of mean 1 / R (what `vllm bench serve` does).
// Prefixes: request i belongs to group i % G; every prompt of a group starts with the same P
// tokens (P <= the prompt's length), the rest is the request's own.
//
// Trace (--trace FILE.jsonl): one JSON object per line, arrival order not required:
//   {"arrival_time": 0.5, "input_len": 1000, "output_len": 200,
//    "prefix_group": 3, "prefix_len": 512}          (prefix fields optional)
//   {"arrival_time": 0.7, "prompt_token_ids": [1, 2, 3], "output_len": 16}
// ("timestamp" is accepted for arrival_time, "prompt_len" for input_len, "max_tokens" for
// output_len.) Errors name the line.
// Token ids: request r's own tokens come from a stream seeded by (seed, r); group g's prefix
// from (seed, g); generated tokens from (seed, r, position) (GeneratedToken). Same inputs,
// same tokens, bit for bit.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvserve::sim {

struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal, kExponential };
  Kind kind = Kind::kFixed;
  double a = 0;  // fixed / lognormal / exponential: the mean; uniform: LO
  double b = 0;  // uniform: HI; lognormal: sigma
};
// "fixed", "uniform:1,100", "lognormal:1000,0.8", "exponential:300". `mean` fills the mean of
// "fixed" and is the default. InvalidArgument naming the text.
Result<LengthDist> ParseLengthDist(std::string_view text, double mean);

enum class Arrivals { kEven, kPoisson };
Result<Arrivals> ParseArrivals(std::string_view text);

struct WorkloadSpec {
  int num_prompts = 100;
  int64_t input_len = 128;
  int64_t output_len = 128;
  std::optional<LengthDist> input_dist;   // nullopt: every prompt input_len tokens
  std::optional<LengthDist> output_dist;  // nullopt: every output output_len tokens
  double request_rate = std::numeric_limits<double>::infinity();
  Arrivals arrivals = Arrivals::kEven;
  int64_t shared_prefix_len = 0;
  int num_prefix_groups = 1;
  uint64_t seed = 0;
  std::string trace_path;  // when set, the only source of requests
};

struct RequestSpec {
  double arrival = 0;  // seconds from the start
  int64_t input_len = 0;
  int64_t output_len = 0;
  int prefix_group = 0;
  int64_t prefix_len = 0;             // <= input_len
  std::vector<int32_t> prompt_ids;    // a trace's explicit ids; empty: generated
};

// The requests, sorted by arrival (stable). `max_len` clamps drawn lengths (prompt + output
// <= max_len). InvalidArgument for bad numbers or trace lines; IoError for an unreadable trace.
Result<std::vector<RequestSpec>> MakeWorkload(const WorkloadSpec& spec, int64_t max_len);

// Request `index`'s prompt: its prefix group's shared tokens, then its own; ids in [0, vocab).
std::vector<int32_t> PromptTokens(const RequestSpec& request, size_t index, uint64_t seed,
                                  int32_t vocab);
// The token "sampled" for request `index` at `position` (the simulator's stand-in output).
int32_t GeneratedToken(uint64_t seed, size_t index, int64_t position, int32_t vocab);

}  // namespace kvserve::sim
