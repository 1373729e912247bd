#include "compat/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvserve::compat {
namespace {

const TokenLogprob* Find(const std::vector<TokenLogprob>& list, int32_t id) {
  auto it =
      std::find_if(list.begin(), list.end(), [&](const TokenLogprob& t) { return t.id == id; });
  return it == list.end() ? nullptr : &*it;
}

// Records |kvserve - llama.cpp| for one token at one position.
void CompareValue(int position, int32_t id, const TokenLogprob* kv, const TokenLogprob* llama,
                  const CompareOptions& o, Comparison& c) {
  if (kv == nullptr || !kv->logprob.has_value()) {
    c.failures.push_back(
        fmt::format("position {}: token {} (in llama.cpp's top) is not among "
                    "kvserve's logprobs",
                    position, id));
    return;
  }
  if (llama == nullptr) {
    c.failures.push_back(
        fmt::format("position {}: no llama.cpp logprob for token {}", position, id));
    return;
  }
  if (!llama->logprob.has_value()) {
    ++c.num_unmeasurable;
    return;
  }
  if (std::max(*kv->logprob, *llama->logprob) < o.min_logprob) {
    ++c.num_below_floor;
    return;
  }
  ++c.num_values;
  const double diff = std::fabs(*kv->logprob - *llama->logprob);
  if (diff > c.max_abs_diff || c.worst_position < 0) {
    c.max_abs_diff = std::max(c.max_abs_diff, diff);
    c.worst_position = position;
    c.worst_token = id;
  }
}

void ComparePosition(int index, const PositionLogprobs& p, const CompareOptions& o, Comparison& c) {
  ++c.num_positions;
  if (p.llama_top.empty() || p.kvserve_top.empty()) {
    c.failures.push_back(fmt::format("position {}: an empty distribution", index));
    return;
  }
  // An unmeasurable logprob (underflowed) is far below any measurable one.
  const double first = p.llama_top[0].logprob.value_or(-INFINITY);
  const double second =
      p.llama_top.size() > 1 ? p.llama_top[1].logprob.value_or(-INFINITY) : -INFINITY;
  if (first > o.near_certain_logprob) ++c.num_near_certain;
  if (first - second > o.decisive_margin) {
    ++c.num_decisive;
    if (p.kvserve_top[0].id == p.llama_top[0].id) {
      ++c.num_top1_agree;
    } else {
      c.failures.push_back(fmt::format(
          "position {}: top-1 differs: llama.cpp {} ({:.6f}, margin {:.6f}), kvserve {}", index,
          p.llama_top[0].id, first, first - second, p.kvserve_top[0].id));
    }
  }
  const size_t n = static_cast<size_t>(o.top_n);
  for (size_t i = 0; i < std::min(n, p.llama_top.size()); ++i) {
    const int32_t id = p.llama_top[i].id;
    CompareValue(index, id, Find(p.kvserve_top, id), &p.llama_top[i], o, c);
  }
  for (size_t i = 0; i < std::min(n, p.kvserve_top.size()); ++i) {
    const int32_t id = p.kvserve_top[i].id;
    const auto in_llama_top = p.llama_top.begin() + std::min(n, p.llama_top.size());
    if (std::any_of(p.llama_top.begin(), in_llama_top,
                    [&](const TokenLogprob& t) { return t.id == id; })) {
      continue;  // compared above
    }
    CompareValue(index, id, &p.kvserve_top[i], Find(p.llama_lookup, id), o, c);
  }
}

}  // namespace

Comparison Compare(std::span<const PositionLogprobs> positions, const CompareOptions& options) {
  Comparison c;
  for (size_t i = 0; i < positions.size(); ++i) {
    ComparePosition(static_cast<int>(i), positions[i], options, c);
  }
  return c;
}

std::string SummaryCells(const Comparison& c) {
  return fmt::format("| {} | {} | {}/{} | {} | {} | {:.2e} |", c.num_positions, c.num_decisive,
                     c.num_top1_agree, c.num_decisive, c.num_near_certain, c.num_values,
                     c.max_abs_diff);
}

}  // namespace kvserve::compat
