// BlockHashTable against std::unordered_map under random inserts and erases, with hashes that
// collide on their home slot (the backward-shift deletion is the tricky part).
#include "kv/block_hash_table.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace kvserve::kv {
namespace {

TEST(BlockHashTable, MatchesAMapUnderChurn) {
  // Capacity 300 -> 1024 slots. Colliding keys home at 1020..1027 (mod 1024: the runs wrap).
  for (bool colliding : {true, false}) {
    constexpr size_t kCapacity = 300;
    BlockHashTable table(kCapacity);
    std::unordered_map<BlockHash, int32_t, BlockHashHasher> ref;
    std::mt19937_64 rng(colliding ? 1 : 2);
    std::vector<BlockHash> keys;
    for (int i = 0; i < 600; ++i) keys.push_back({colliding ? 1020 + rng() % 8 : rng(), rng()});
    for (int step = 0; step < 20000; ++step) {
      const BlockHash& k = keys[rng() % keys.size()];
      if (rng() % 2 == 0 && ref.size() < kCapacity) {
        const int32_t block = static_cast<int32_t>(rng() % 1000);
        EXPECT_EQ(table.Insert(k, block), ref.emplace(k, block).second);
      } else {
        EXPECT_EQ(table.Erase(k), ref.erase(k) == 1);
      }
      ASSERT_EQ(table.size(), ref.size());
      if (step % 97 == 0) {
        for (const BlockHash& q : keys) {
          auto it = ref.find(q);
          const std::optional<int32_t> got = table.Find(q);
          ASSERT_EQ(got.has_value(), it != ref.end()) << "step " << step;
          if (got) {
            EXPECT_EQ(*got, it->second);
          }
        }
      }
    }
  }
}

TEST(BlockHashTable, DuplicateInsertChangesNothing) {
  BlockHashTable table(4);
  const BlockHash h{5, 6};
  EXPECT_TRUE(table.Insert(h, 1));
  EXPECT_FALSE(table.Insert(h, 2));
  EXPECT_EQ(table.Find(h), std::optional<int32_t>(1));
  EXPECT_FALSE(table.Erase({5, 7}));
  EXPECT_TRUE(table.Erase(h));
  EXPECT_FALSE(table.Find(h).has_value());
}

}  // namespace
}  // namespace kvserve::kv
