// Compare (compare.h) on hand-made distributions: the suite's checks can fail.
#include "compat/compare.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvserve::compat {
namespace {

PositionLogprobs Position(std::vector<TokenLogprob> kv, std::vector<TokenLogprob> llama) {
  PositionLogprobs p{kv, llama, {}};
  for (size_t i = 0; i < std::min<size_t>(5, kv.size()); ++i) {
    p.llama_lookup.push_back(kv[i]);  // same values unless a test changes them
  }
  return p;
}

TEST(CompareTest, IdenticalDistributionsAgree) {
  const std::vector<TokenLogprob> top = {{7, -0.1}, {3, -2.5}, {9, -3.0}, {1, -4.0}, {2, -5.0}};
  const PositionLogprobs p = Position(top, top);
  const Comparison c = Compare(std::span(&p, 1), {});
  EXPECT_TRUE(c.failures.empty());
  EXPECT_EQ(c.num_decisive, 1);
  EXPECT_EQ(c.num_top1_agree, 1);
  EXPECT_EQ(c.num_values, 5);
  EXPECT_EQ(c.max_abs_diff, 0.0);
  EXPECT_FALSE(c.IsVacuous());
}

TEST(CompareTest, DifferentTop1IsAFailureOnlyWhenDecisive) {
  const PositionLogprobs decisive = Position({{3, -0.6}, {7, -0.8}}, {{7, -0.6}, {3, -0.8}});
  EXPECT_EQ(Compare(std::span(&decisive, 1), {}).failures.size(), 1u);
  // llama.cpp's margin 5e-4 < 1e-3: a tie, either top-1 is fine.
  const PositionLogprobs tie = Position({{3, -0.6930}, {7, -0.6935}}, {{7, -0.6930}, {3, -0.6935}});
  const Comparison c = Compare(std::span(&tie, 1), {});
  EXPECT_TRUE(c.failures.empty());
  EXPECT_EQ(c.num_decisive, 0);
}

TEST(CompareTest, MaxDifferenceCoversBothSidesTop5) {
  PositionLogprobs p =
      Position({{7, -0.1}, {3, -2.5}, {4, -3.0}}, {{7, -0.1}, {3, -2.5}, {5, -3.1}});
  p.kvserve_top.push_back({5, -3.3});  // kvserve's rank-4 is llama.cpp's rank-3: 0.2 apart
  p.llama_lookup = {{7, -0.1}, {3, -2.5}, {4, -3.05}, {5, -3.1}};  // and 4 differs by 0.05
  const Comparison c = Compare(std::span(&p, 1), {});
  EXPECT_TRUE(c.failures.empty());
  EXPECT_NEAR(c.max_abs_diff, 0.2, 1e-12);
  EXPECT_EQ(c.worst_token, 5);
}

TEST(CompareTest, MissingTokensAndUnmeasurableValues) {
  // llama.cpp's rank-2 token 9 is not among kvserve's logprobs: the caller asked too few.
  const PositionLogprobs missing = Position({{7, -0.1}}, {{7, -0.1}, {9, -2.4}});
  EXPECT_EQ(Compare(std::span(&missing, 1), {}).failures.size(), 1u);
  // An underflowed llama.cpp probability is skipped and counted; values far below the floor
  // on both sides are skipped and counted.
  const PositionLogprobs low =
      Position({{7, 0.0}, {3, -95.0}, {4, -30.0}}, {{7, 0.0}, {4, -30.5}, {3, std::nullopt}});
  const Comparison c = Compare(std::span(&low, 1), {});
  EXPECT_TRUE(c.failures.empty());
  EXPECT_EQ(c.num_unmeasurable, 1);
  EXPECT_EQ(c.num_below_floor, 1);
  EXPECT_EQ(c.num_values, 1);
  EXPECT_TRUE(c.IsVacuous());
}

}  // namespace
}  // namespace kvserve::compat
