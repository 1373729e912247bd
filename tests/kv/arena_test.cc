// KvArena::Prefault: every page of the arena resident afterwards (mincore), the arena's
// accounting unchanged; KvCacheManagerOptions::prefault_memory does it for every group, and
// prefault_tokens for the first step's blocks only.
#include "kv/arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/test_configs.h"

namespace kvserve::kv {
namespace {

// Pages of [p, p + bytes) the kernel reports resident.
int64_t ResidentPages(const std::byte* p, size_t bytes, int64_t* total) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  std::vector<unsigned char> vec((end - begin + page - 1) / page);
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()), 0);
  *total = static_cast<int64_t>(vec.size());
  int64_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

TEST(KvArenaTest, PrefaultMakesEveryPageResident) {
  // Past the huge-page threshold (2 MiB-aligned slices) and below it (64-byte alignment).
  for (const auto& [block_bytes, blocks] : {std::pair<int64_t, int64_t>{20480, 700},
                                           std::pair<int64_t, int64_t>{4160, 5}}) {
    KvArena arena(block_bytes, blocks, /*allocate_memory=*/true);
    arena.Prefault(3);
    int64_t total = 0;
    EXPECT_EQ(ResidentPages(arena.data(), arena.allocated_bytes(), &total), total)
        << block_bytes << " x " << blocks;
    EXPECT_EQ(arena.allocated_bytes(), block_bytes * blocks);
  }
  KvArena no_memory(4096, 4, /*allocate_memory=*/false);
  no_memory.Prefault(2);  // nothing to do
  EXPECT_EQ(no_memory.allocated_bytes(), 0);
}

TEST(KvArenaTest, ManagerPrefaultsEveryGroupWhenAsked) {
  const KvCacheConfig config = testing::V41Like(16, 512);  // sliding, full and latent groups
  KvCacheManagerOptions options;
  options.prefault_memory = true;
  options.fingerprint = testing::TestFingerprint(config);
  auto m = KvCacheManager::Create(config, 8 << 20, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  int64_t bytes = 0;
  for (int g = 0; g < (*m)->num_groups(); ++g) {
    const KvArena& arena = (*m)->arena(g);
    int64_t total = 0;
    EXPECT_EQ(ResidentPages(arena.data(), arena.allocated_bytes(), &total), total) << g;
    bytes += arena.allocated_bytes();
  }
  EXPECT_EQ((*m)->prefaulted_bytes(), bytes);
  EXPECT_GE((*m)->prefault_seconds(), 0.0);
}

TEST(KvArenaTest, ManagerPrefaultsTheFirstStepsBlocksOnly) {
  const KvCacheConfig config = testing::V41Like(16, 512);
  KvCacheManagerOptions options;
  options.prefault_tokens = 100;  // ceil(100 / 16) + 1 = 8 blocks per group
  options.fingerprint = testing::TestFingerprint(config);
  auto m = KvCacheManager::Create(config, 256 << 20, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  int big_groups = 0;
  int64_t bytes = 0;
  for (int g = 0; g < (*m)->num_groups(); ++g) {
    const KvArena& arena = (*m)->arena(g);
    bytes += std::min<int64_t>(8, arena.num_blocks()) * arena.block_bytes();
    int64_t first = 0, all = 0;
    EXPECT_EQ(ResidentPages(arena.data(), 8 * arena.block_bytes(), &first), first) << g;
    // Where the arena is big, the first blocks' (huge) pages are a small part of it.
    if (arena.allocated_bytes() < int64_t{16} << 20) continue;
    ++big_groups;
    const int64_t resident = ResidentPages(arena.data(), arena.allocated_bytes(), &all);
    EXPECT_LT(resident, all / 2) << g;
  }
  EXPECT_GT(big_groups, 0);
  EXPECT_EQ((*m)->prefaulted_bytes(), bytes);  // what creation reports (bench throughput prints it)
}

TEST(KvArenaTest, BookkeepingOnlyManagerPrefaultsNothing) {
  const KvCacheConfig config = testing::V41Like(16, 512);
  KvCacheManagerOptions options;
  options.allocate_memory = false;
  options.prefault_tokens = 100;
  options.fingerprint = testing::TestFingerprint(config);
  auto m = KvCacheManager::Create(config, 256 << 20, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->prefaulted_bytes(), 0);
}

}  // namespace
}  // namespace kvserve::kv
