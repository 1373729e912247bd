#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kv/test_configs.h"

namespace kvserve::kv {
namespace {

std::unique_ptr<KvCacheManager> MakeManager(const KvCacheConfig& config, uint64_t budget,
                                            bool caching = true, bool memory = true) {
  KvCacheManagerOptions options;
  options.enable_prefix_caching = caching;
  options.allocate_memory = memory;
  options.fingerprint = testing::TestFingerprint(config);
  auto m = KvCacheManager::Create(config, budget, options);
  CHECK(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<TokenId> Tokens(int n, TokenId start) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Looks up, allocates and "computes" a whole prompt; returns the hit it got.
PrefixHit RunPrompt(KvCacheManager& m, RequestId id, const std::vector<TokenId>& tokens,
                    std::string_view salt = "") {
  PrefixHit hit = m.FindLongestCachedPrefix(tokens, salt);
  const PrefixHit copy = hit;
  const int64_t new_tokens = static_cast<int64_t>(tokens.size()) - hit.num_cached_tokens;
  CHECK(m.AllocateNew(id, std::move(hit), new_tokens).has_value());
  m.CacheFullBlocks(id, tokens, static_cast<int64_t>(tokens.size()));
  CHECK(m.CheckIntegrity().ok()) << m.CheckIntegrity().ToString();
  return copy;
}

// SmallHybrid(4, 8): full page 4 x 2 x 16 B = 128 B, sliding the same. With max_model_len 64
// and chunks of 4 tokens, a request peaks at 16 full and min(ceil(12 / 4) + 1, 16) = 4
// sliding blocks: M = 20 x 128 B; usable 6400 B gives 40 full and 10 sliding blocks.
KvCacheConfig HitRuleConfig() {
  KvCacheConfig config = testing::SmallHybrid(4, 8);
  config.max_chunk_tokens = 4;
  return config;
}
constexpr uint64_t kHitRuleBudget = 6400 + 2 * 128;

TEST(KvCacheManagerTest, PoolSizesFollowTheBudgetSplit) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  EXPECT_EQ(m->pool(0).NumUsableBlocks(), 40);
  EXPECT_EQ(m->pool(1).NumUsableBlocks(), 10);
}

// Block 4, window 8, prompt of 14 tokens computed and freed, then asked again:
//   cap = ((14 - 1) / 4) * 4 = 12 tokens = 3 blocks.
//   full: blocks 0, 1, 2; sliding: [12 - 8, 12) = [4, 12) = blocks 1, 2 (entry 0 null).
TEST(KvCacheManagerTest, HybridHitWorkedExample) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  const std::vector<TokenId> prompt = Tokens(14, 100);
  EXPECT_EQ(RunPrompt(*m, 1, prompt).num_cached_tokens, 0);
  const std::vector<BlockId> full = m->BlockTable(1, 0);
  const std::vector<BlockId> sliding = m->BlockTable(1, 1);
  m->Free(1);
  const PrefixHit hit = m->FindLongestCachedPrefix(prompt, "");
  EXPECT_EQ(hit.num_cached_tokens, 12);
  EXPECT_EQ(hit.blocks_per_group[0], (std::vector<BlockId>{full[0], full[1], full[2]}));
  EXPECT_EQ(hit.blocks_per_group[1], (std::vector<BlockId>{kNullBlock, sliding[1], sliding[2]}));
  // Adopting the hit takes those blocks out of the free queue and keeps the sliding null.
  ASSERT_TRUE(m->AllocateNew(2, hit, 2).has_value());
  EXPECT_EQ(m->BlockTable(2, 1)[0], kNullBlock);
  EXPECT_EQ(m->pool(0).RefCount(full[1]), 1);
  EXPECT_EQ(m->pool(1).RefCount(sliding[0]), 0);
  EXPECT_TRUE(m->CheckIntegrity().ok());
  const KvCacheStats stats = m->Stats();
  EXPECT_EQ(stats.prefix_query_tokens, 28);
  EXPECT_EQ(stats.prefix_hit_tokens, 12);
}

// A fully cached 12-token prompt still computes its last token: cap (12 - 1) / 4 * 4 = 8.
TEST(KvCacheManagerTest, NeverReturnsTheWholePrompt) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  const std::vector<TokenId> prompt = Tokens(12, 7);
  RunPrompt(*m, 1, prompt);
  EXPECT_EQ(m->FindLongestCachedPrefix(prompt, "").num_cached_tokens, 8);
  EXPECT_EQ(m->FindLongestCachedPrefix(Tokens(13, 7), "").num_cached_tokens, 12);
  EXPECT_EQ(m->FindLongestCachedPrefix(Tokens(1, 7), "").num_cached_tokens, 0);
  EXPECT_EQ(m->FindLongestCachedPrefix({}, "").num_cached_tokens, 0);
}

// Request 1 (24-token prompt) decodes; at 24 computed the sliding group releases entries
// [0, (24 - 8) / 4) = 0..3 (ids 4, 3, 2, 1 join the queue tail after the unused 8, 9, 10).
// Request 2 (20 unrelated tokens) takes 5 sliding blocks: 8, 9, 10, 4, 3, evicting entries 3
// and 2 of request 1. The 17-token prefix of request 1 (cap 16 tokens = 4 blocks):
//   full group: blocks 0..3 are held by request 1: 4 blocks.
//   sliding, L = 16: needs [8, 16) = entries 2, 3: evicted. L = 12: [4, 12) = entries 1, 2:
//   no. L = 8: [0, 8) = entries 0, 1: cached. So 8 tokens; the full group gives blocks 0, 1.
TEST(KvCacheManagerTest, SlidingReleaseAndEvictionLimitTheHit) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  const std::vector<TokenId> prompt = Tokens(24, 1000);
  RunPrompt(*m, 1, prompt);
  EXPECT_EQ(m->BlockTable(1, 1), (std::vector<BlockId>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(m->AllocateSlots(1, 24, 1).has_value());
  EXPECT_EQ(m->BlockTable(1, 1), (std::vector<BlockId>{0, 0, 0, 0, 5, 6, 7}));
  EXPECT_EQ(m->pool(1).NumFreeBlocks(), 7);
  // Before the eviction, released blocks still serve prefixes: 16 tokens.
  const std::vector<TokenId> prefix(prompt.begin(), prompt.begin() + 17);
  EXPECT_EQ(m->FindLongestCachedPrefix(prefix, "").num_cached_tokens, 16);
  RunPrompt(*m, 2, Tokens(20, 5000));
  EXPECT_EQ(m->BlockTable(2, 1), (std::vector<BlockId>{8, 9, 10, 4, 3}));
  EXPECT_EQ(m->Stats().num_evictions, 2);
  const PrefixHit hit = m->FindLongestCachedPrefix(prefix, "");
  EXPECT_EQ(hit.num_cached_tokens, 8);
  EXPECT_EQ(hit.blocks_per_group[0], (std::vector<BlockId>{1, 2}));
  EXPECT_EQ(hit.blocks_per_group[1], (std::vector<BlockId>{1, 2}));
}

TEST(KvCacheManagerTest, SaltAndDisabledCachingIsolate) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  const std::vector<TokenId> prompt = Tokens(13, 3);
  RunPrompt(*m, 1, prompt, "alice");
  EXPECT_EQ(m->FindLongestCachedPrefix(prompt, "alice").num_cached_tokens, 12);
  EXPECT_EQ(m->FindLongestCachedPrefix(prompt, "bob").num_cached_tokens, 0);
  EXPECT_EQ(m->FindLongestCachedPrefix(prompt, "").num_cached_tokens, 0);
  auto off = MakeManager(HitRuleConfig(), kHitRuleBudget, /*caching=*/false);
  RunPrompt(*off, 1, prompt);
  off->Free(1);
  EXPECT_EQ(off->FindLongestCachedPrefix(prompt, "").num_cached_tokens, 0);
  EXPECT_TRUE(off->CheckIntegrity().ok());
}

TEST(KvCacheManagerTest, OutOfBlocksIsAValueAndChangesNothing) {
  auto m = MakeManager(HitRuleConfig(), kHitRuleBudget);
  // 10 sliding blocks: a 40-token prompt in one chunk needs 10, a 44-token one 11.
  EXPECT_FALSE(m->AllocateNew(1, m->FindLongestCachedPrefix(Tokens(44, 0), ""), 44).has_value());
  EXPECT_FALSE(m->HasRequest(1));
  EXPECT_EQ(m->pool(0).NumFreeBlocks(), 40);
  ASSERT_TRUE(m->AllocateNew(1, m->FindLongestCachedPrefix(Tokens(40, 0), ""), 40).has_value());
  EXPECT_FALSE(m->AllocateSlots(1, 0, 41).has_value());  // nothing released at 0 computed
  EXPECT_EQ(m->BlockTable(1, 0).size(), 10u);
  // Once 40 are computed, 8 sliding blocks leave the window and the step fits.
  EXPECT_TRUE(m->AllocateSlots(1, 40, 1).has_value());
  EXPECT_TRUE(m->CheckIntegrity().ok());
}

TEST(KvCacheManagerTest, LatentAndSlidingGroupsShareHits) {
  KvCacheConfig config = testing::V41Like(16, 512);
  config.max_chunk_tokens = 64;
  auto m = MakeManager(config, 64ull << 20, true, /*memory=*/false);
  const std::vector<TokenId> prompt = Tokens(300, 9);
  RunPrompt(*m, 1, prompt);
  m->Free(1);
  const PrefixHit hit = m->FindLongestCachedPrefix(prompt, "");
  EXPECT_EQ(hit.num_cached_tokens, 288);
  EXPECT_EQ(hit.blocks_per_group[1].size(), 18u);  // every latent block
  // Sliding window 128 at L = 288 needs [160, 288) = blocks 10..17; 0..9 are null.
  for (int i = 0; i < 18; ++i) EXPECT_EQ(hit.blocks_per_group[0][i] == kNullBlock, i < 10) << i;
}

}  // namespace
}  // namespace kvserve::kv
