// The comparison the compat suite makes between kvserve's and llama.cpp's next-token
// distributions at the same positions of the same token sequence (issue 14, "against
// llama.cpp itself"): plain data in, a summary out, so it is tested on its own
// (compare_test.cc) and the suite cannot pass by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvserve::compat {

struct TokenLogprob {
  int32_t id = 0;
  // Natural log of the raw model probability; nullopt when llama.cpp's float32 probability
  // underflowed (below ~e^-87), so the value cannot be measured there.
  std::optional<double> logprob;
};

// Both sides' view of one position (the distribution of the token at that position).
struct PositionLogprobs {
  std::vector<TokenLogprob> kvserve_top;   // kvserve's most likely tokens, most likely first
  std::vector<TokenLogprob> llama_top;     // llama.cpp's most likely tokens, most likely first
  std::vector<TokenLogprob> llama_lookup;  // llama.cpp's logprobs of kvserve_top's ids
};

struct CompareOptions {
  int top_n = 5;                  // the difference is taken over each side's top_n
  double decisive_margin = 1e-3;  // top-1 must agree where llama.cpp's top-1 - top-2 exceeds it
  double near_certain_logprob = -1e-2;  // llama.cpp's top-1 above it: the position decides little
  // A pair is compared when either side's logprob is at least this (probability ~2e-9). Far
  // below, both sides' logprobs carry an absolute error that grows with the logit gap (e.g.
  // llama.cpp rounds activations to f16 for F16 weights: ~5e-4 x the gap, 0.03 at e^-70), and
  // such tokens have no effect on any sampling.
  double min_logprob = -20.0;
};

struct Comparison {
  int num_positions = 0;
  int num_decisive = 0;       // positions where llama.cpp's margin exceeds decisive_margin
  int num_top1_agree = 0;     // of those, positions with the same top-1 token
  int num_near_certain = 0;   // positions whose llama.cpp top-1 has probability > ~0.99
  int num_values = 0;         // (token, position) pairs compared
  int num_unmeasurable = 0;   // pairs skipped: llama.cpp's probability underflowed float32
  int num_below_floor = 0;    // pairs skipped: both logprobs below min_logprob
  double max_abs_diff = 0.0;  // max |kvserve - llama.cpp| logprob over the compared pairs
  int worst_position = -1;    // where max_abs_diff was seen (index into the positions)
  int32_t worst_token = -1;
  std::vector<std::string> failures;  // top-1 disagreements and tokens missing on one side

  // True when every position's top-1 is near-certain: the top-1 check says little there.
  bool IsVacuous() const { return num_positions > 0 && num_near_certain == num_positions; }
};

// Compares position by position. A token of llama.cpp's top_n that is absent from
// kvserve_top, or one of kvserve's top_n absent from llama_lookup, is a failure (ask kvserve
// for more than top_n logprobs so near-ties at rank top_n are covered).
Comparison Compare(std::span<const PositionLogprobs> positions, const CompareOptions& options);

// "| positions | decisive | top-1 agree | near-certain | compared | max |diff| |" cells for
// docs tables.
std::string SummaryCells(const Comparison& c);

}  // namespace kvserve::compat
