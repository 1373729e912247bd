#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace kvserve::kv {
namespace {

BlockHash H(uint64_t n) {
  return BlockHash{n, ~n};
}

TEST(BlockPoolTest, AllocatesUntilEmptyThenReturnsNothing) {
  BlockPool pool(5, /*enable_caching=*/true);  // null block + 4 usable
  EXPECT_EQ(pool.NumFreeBlocks(), 4);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (std::vector<BlockId>{1, 2, 3}));
  EXPECT_FALSE(pool.Allocate(2).has_value());  // only 1 left: nothing taken
  EXPECT_EQ(pool.NumFreeBlocks(), 1);
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.75);
  EXPECT_TRUE(pool.CheckIntegrity().ok());
  pool.Free(*a);
  EXPECT_EQ(pool.NumFreeBlocks(), 4);
  EXPECT_TRUE(pool.CheckIntegrity().ok());
}

// Freed last-first, a request's tail is evicted first; cached blocks are found by hash and
// leave the middle of the queue when touched.
TEST(BlockPoolTest, LruEvictionAndCachedHits) {
  BlockPool pool(5, true);
  std::vector<std::pair<BlockId, BlockHash>> evicted;
  pool.SetEvictionCallback([&](BlockId b, const BlockHash& h) { evicted.push_back({b, h}); });
  auto a = pool.Allocate(4).value();  // 1 2 3 4
  for (int i = 0; i < 4; ++i) pool.CacheFullBlock(a[i], H(i));
  const std::vector<BlockId> reversed(a.rbegin(), a.rend());
  pool.Free(reversed);  // queue: 4 3 2 1
  EXPECT_EQ(pool.LookupCached(H(2)), 3);
  pool.Touch(std::vector<BlockId>{3});  // a prefix hit takes block 3 out of the middle
  EXPECT_EQ(pool.RefCount(3), 1);
  EXPECT_EQ(pool.NumFreeBlocks(), 3);
  auto b = pool.Allocate(2).value();
  EXPECT_EQ(b, (std::vector<BlockId>{4, 2}));
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0].first, 4);
  EXPECT_EQ(evicted[0].second, H(3));
  EXPECT_FALSE(pool.LookupCached(H(3)).has_value());
  EXPECT_FALSE(pool.HashOf(4).has_value());
  EXPECT_EQ(pool.LookupCached(H(0)), 1);  // still cached, still free
  EXPECT_EQ(pool.num_evictions(), 2);
  EXPECT_TRUE(pool.CheckIntegrity().ok());
}

// reset_prefix_cache: free cached blocks lose their hashes (reported), held ones keep them.
TEST(BlockPoolTest, EvictAllFreeDropsOnlyUnreferencedCachedBlocks) {
  BlockPool pool(5, true);
  std::vector<BlockId> evicted;
  pool.SetEvictionCallback([&](BlockId b, const BlockHash&) { evicted.push_back(b); });
  auto a = pool.Allocate(3).value();  // 1 2 3
  for (int i = 0; i < 3; ++i) pool.CacheFullBlock(a[i], H(i));
  pool.Free(std::vector<BlockId>{1, 2});  // block 3 stays held
  EXPECT_EQ(pool.EvictAllFree(), 2);
  EXPECT_EQ(evicted, (std::vector<BlockId>{1, 2}));
  EXPECT_FALSE(pool.LookupCached(H(0)).has_value());
  EXPECT_EQ(pool.LookupCached(H(2)), 3);
  EXPECT_EQ(pool.NumFreeBlocks(), 3);
  EXPECT_TRUE(pool.CheckIntegrity().ok());
}

TEST(BlockPoolTest, DuplicateHashStaysUncachedAndCachingCanBeOff) {
  BlockPool pool(4, true);
  auto a = pool.Allocate(2).value();
  pool.CacheFullBlock(a[0], H(7));
  pool.CacheFullBlock(a[1], H(7));  // same content computed twice
  EXPECT_EQ(pool.LookupCached(H(7)), a[0]);
  EXPECT_FALSE(pool.HashOf(a[1]).has_value());
  EXPECT_TRUE(pool.CheckIntegrity().ok());
  BlockPool off(4, false);
  auto c = off.Allocate(1).value();
  off.CacheFullBlock(c[0], H(1));
  EXPECT_FALSE(off.LookupCached(H(1)).has_value());
}

TEST(BlockPoolTest, SharedBlocksNeedEveryReferenceFreed) {
  BlockPool pool(3, true);
  auto a = pool.Allocate(1).value();
  pool.Touch(a);
  EXPECT_EQ(pool.RefCount(a[0]), 2);
  pool.Free(a);
  EXPECT_EQ(pool.NumFreeBlocks(), 1);
  pool.Free(a);
  EXPECT_EQ(pool.NumFreeBlocks(), 2);
  EXPECT_TRUE(pool.CheckIntegrity().ok());
}

TEST(BlockPoolDeathTest, DoubleFreeIsABug) {
  BlockPool pool(3, true);
  auto a = pool.Allocate(1).value();
  pool.Free(a);
  EXPECT_DEATH(pool.Free(a), "double free");
}

}  // namespace
}  // namespace kvserve::kv
