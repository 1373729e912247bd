#include "offload/cpu_tier.h"

#include <gtest/gtest.h>

#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;

TEST(CpuTierTest, BoundedLruWithCascade) {
  CpuTier tier(3 * 100);
  std::vector<BlockKey> cascaded;
  tier.SetEvictionSink([&](const BlockKey& k, SharedBytes b) {
    EXPECT_TRUE(b->size() == 100u || b->size() == 1000u);
    cascaded.push_back(k);
  });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier.Put(Key(i), testing::RandomBytes(100, i)).ok());
  EXPECT_EQ(tier.usage_bytes(), 300u);
  ASSERT_NE(tier.GetShared(Key(0)), nullptr);  // 0 becomes most recent: 1 is the LRU
  ASSERT_TRUE(tier.Put(Key(3), testing::RandomBytes(100, 3)).ok());
  ASSERT_EQ(cascaded.size(), 1u);
  EXPECT_EQ(cascaded[0], Key(1));
  EXPECT_FALSE(tier.Contains(Key(1)));
  EXPECT_TRUE(tier.Contains(Key(0)));
  EXPECT_LE(tier.usage_bytes(), tier.capacity_bytes());
  Result<std::optional<Bytes>> got = tier.Get(Key(3));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, testing::RandomBytes(100, 3));
  EXPECT_EQ(tier.Stats().evictions, 1);
  EXPECT_EQ(tier.Stats().hits, 2);

  // A block bigger than the whole bound is not kept but still cascades.
  ASSERT_TRUE(tier.Put(Key(9), testing::RandomBytes(1000, 9)).ok());
  EXPECT_FALSE(tier.Contains(Key(9)));
  EXPECT_EQ(cascaded.back(), Key(9));
  EXPECT_EQ(tier.num_blocks(), 3u);
}

TEST(CpuTierTest, ConcurrentUseStaysInsideTheBound) {
  CpuTier tier(50 * 64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      for (int i = 0; i < 500; ++i) {
        const BlockKey key = Key((i * 7 + t) % 120);
        if (i % 3 == 0) {
          SharedBytes b = tier.GetShared(key);
          if (b) {
            EXPECT_EQ(*b, testing::RandomBytes(64, (i * 7 + t) % 120));
          }
        } else {
          (void)tier.Put(key, testing::RandomBytes(64, (i * 7 + t) % 120));
        }
        EXPECT_LE(tier.usage_bytes(), tier.capacity_bytes());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tier.usage_bytes(), tier.num_blocks() * 64);
}

}  // namespace
}  // namespace kvserve::offload
