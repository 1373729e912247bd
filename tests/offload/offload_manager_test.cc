#include "offload/offload_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "kv/kv_cache_manager.h"
#include "offload/redis_server.h"
#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;
using testing::PayloadFor;
using testing::ScratchDir;
using testing::TestIdentity;

OffloadConfig Config(uint64_t cpu_bytes, const std::string& root_dir = "", int redis_port = 0) {
  OffloadConfig c;
  c.spec_name = "TieringOffloadingSpec";
  c.cpu_bytes_to_use = cpu_bytes;
  if (!root_dir.empty()) c.file = FileTierConfig{root_dir, 8, 8};
  if (redis_port != 0) c.redis = RedisTierConfig{"", RedisAddress{"127.0.0.1", redis_port, 0}};
  return c;
}

// A load's outcome and the buffers it filled (one per key, the group's block size).
struct Loaded {
  LoadResult result;
  std::vector<Bytes> blocks;
};

Loaded Load(OffloadManager& m, const std::vector<BlockKey>& keys) {
  Loaded out;
  out.blocks.resize(keys.size());
  std::vector<LoadTarget> targets;
  for (size_t i = 0; i < keys.size(); ++i) {
    out.blocks[i].resize(m.identity().group_block_bytes.at(keys[i].group));
    targets.push_back({keys[i], out.blocks[i]});
  }
  out.result = m.LoadAsync(std::move(targets)).Get();
  return out;
}

std::vector<BlockKey> Keys(int n) {
  std::vector<BlockKey> keys;
  for (int i = 0; i < n; ++i) keys.push_back(Key(i));
  return keys;
}

// CPU holds 4 of 10 blocks; the rest cascade to files; all 10 load back, from both tiers.
TEST(OffloadManagerTest, CpuThenFileAndRestart) {
  ScratchDir dir("manager");
  const RecordIdentity id = TestIdentity();
  {
    auto m = OffloadManager::Create(Config(4 * 256, dir.path()), id);
    for (int i = 0; i < 10; ++i) m->Store(Key(i), PayloadFor(id, i));
    m->Flush();
    EXPECT_EQ(m->cpu_tier()->num_blocks(), 4u);
    EXPECT_EQ(m->file_tier()->num_indexed(), 10u);
    std::vector<BlockKey> keys = Keys(10);
    EXPECT_EQ(m->CountAvailable(keys), 10u);
    Loaded r = Load(*m, keys);
    ASSERT_EQ(r.result.num_loaded, 10u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(r.blocks[i], PayloadFor(id, i)) << i;
    EXPECT_EQ(r.result.blocks_per_tier[0] + r.result.blocks_per_tier[1], 10);
    EXPECT_GE(r.result.blocks_per_tier[1], 6);
  }
  // Restart: a new manager on the same directory serves every block from files.
  auto m = OffloadManager::Create(Config(64 * 256, dir.path()), id);
  std::vector<BlockKey> keys = Keys(12);
  EXPECT_EQ(m->CountAvailable(keys), 10u);
  Loaded r = Load(*m, keys);
  ASSERT_EQ(r.result.num_loaded, 10u);
  EXPECT_EQ(r.result.blocks_per_tier[static_cast<int>(TierKind::kFile)], 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r.blocks[i], PayloadFor(id, i));
  // Loaded blocks were promoted: the second load is all CPU.
  Loaded again = Load(*m, Keys(10));
  EXPECT_EQ(again.result.blocks_per_tier[static_cast<int>(TierKind::kCpu)], 10);
  const std::string text = m->PrometheusText();
  EXPECT_NE(text.find("kvserve:offload_hits_total{tier=\"file\"} 10"), std::string::npos) << text;
  EXPECT_NE(text.find("kvserve:offload_hits_total{tier=\"cpu\"} 10"), std::string::npos) << text;
}

// The read threads write straight into the caller's buffers; once Cancel returns they write
// nothing more (an aborted request's device blocks may be reused at once).
TEST(OffloadManagerTest, CancelledLoadWritesNothingAfterCancelReturns) {
  ScratchDir dir("cancel");
  const RecordIdentity id = TestIdentity();
  auto m = OffloadManager::Create(Config(0, dir.path()), id);
  constexpr int kBlocks = 400;
  for (int i = 0; i < kBlocks; ++i) m->Store(Key(i), PayloadFor(id, i));
  m->Flush();
  for (int round = 0; round < 5; ++round) {
    std::vector<Bytes> blocks(kBlocks, Bytes(id.group_block_bytes[0], std::byte{0}));
    std::vector<LoadTarget> targets;
    for (int i = 0; i < kBlocks; ++i) targets.push_back({Key(i), blocks[i]});
    PendingLoad load = m->LoadAsync(std::move(targets));
    load.Cancel();
    const std::vector<Bytes> at_cancel = blocks;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(blocks, at_cancel) << "round " << round;
    // Whatever did arrive before the cancel is a whole, checked block or untouched zeros.
    for (int i = 0; i < kBlocks; ++i) {
      if (blocks[i] != Bytes(blocks[i].size(), std::byte{0})) {
        EXPECT_EQ(blocks[i], PayloadFor(id, i)) << i;
      }
    }
  }
}

// A hole in the run: the load stops at the first block no tier can serve.
TEST(OffloadManagerTest, LoadStopsAtTheFirstMissingOrCorruptBlock) {
  ScratchDir dir("hole");
  const RecordIdentity id = TestIdentity();
  auto m = OffloadManager::Create(Config(0, dir.path()), id);
  for (int i = 0; i < 6; ++i) m->Store(Key(i), PayloadFor(id, i));
  m->Flush();
  ASSERT_EQ(::truncate(m->file_tier()->PathFor(Key(3)).c_str(), 100), 0);
  Loaded r = Load(*m, Keys(6));
  EXPECT_EQ(r.result.num_loaded, 3u);
  EXPECT_EQ(m->file_tier()->Stats().failed_checksums, 1);
  EXPECT_EQ(m->CountAvailable(Keys(6)), 3u);
}

TEST(OffloadManagerTest, UnusableFileTierIsServedAround) {
  const RecordIdentity id = TestIdentity();
  auto m = OffloadManager::Create(Config(8 * 256, "/proc/kvserve_cannot_exist"), id);
  for (int i = 0; i < 16; ++i) m->Store(Key(i), PayloadFor(id, i));
  m->Flush();
  EXPECT_GT(m->file_tier()->Stats().errors, 0);
  Loaded r = Load(*m, std::vector<BlockKey>{Key(15)});
  ASSERT_EQ(r.result.num_loaded, 1u);
  EXPECT_EQ(r.blocks[0], PayloadFor(id, 15));
}

TEST(OffloadManagerTest, RedisSharedBetweenTwoManagers) {
  if (!testing::RedisServer::Available()) GTEST_SKIP() << "redis-server not installed";
  testing::RedisServer server;
  ASSERT_TRUE(server.running());
  const RecordIdentity id = TestIdentity();
  auto first = OffloadManager::Create(Config(1 << 20, "", server.port()), id);
  for (int i = 0; i < 8; ++i) first->Store(Key(i), PayloadFor(id, i));
  first->Flush();
  auto second = OffloadManager::Create(Config(1 << 20, "", server.port()), id);
  EXPECT_EQ(second->CountAvailable(Keys(9)), 8u);
  Loaded r = Load(*second, Keys(8));
  ASSERT_EQ(r.result.num_loaded, 8u);
  EXPECT_EQ(r.result.blocks_per_tier[static_cast<int>(TierKind::kRedis)], 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.blocks[i], PayloadFor(id, i));
  server.Kill();  // a dead Redis: misses and counted errors, never a crash
  auto third = OffloadManager::Create(Config(1 << 20, "", server.port()), id);
  EXPECT_EQ(third->CountAvailable(Keys(8)), 0u);
  EXPECT_EQ(Load(*third, Keys(8)).result.num_loaded, 0u);
  third->Store(Key(1), PayloadFor(id, 1));
  third->Flush();
  EXPECT_GT(third->redis_tier()->Stats().errors, 0);
}

// The device cache's evictions go through the manager and come back bit-identical, for a full
// and a sliding group, into fresh blocks.
TEST(OffloadManagerTest, KvBytesAfterReloadEqualTheOriginal) {
  kv::KvCacheConfig config;
  config.num_layers = 2;
  config.block_size = 4;
  config.max_model_len = 64;
  config.groups.push_back({kv::FullAttention{1, 4, tensor::DType::kF32}, {0}, {}});
  config.groups.push_back({kv::SlidingWindow{8, 1, 4, tensor::DType::kF32}, {1}, {}});
  kv::KvCacheManagerOptions options;
  options.fingerprint = {"digest", "test", kv::DescribeKvFormats(config), 4};
  auto kvm_or = kv::KvCacheManager::Create(config, 20 * 128 * 2, options);
  ASSERT_TRUE(kvm_or.ok()) << kvm_or.status().ToString();
  auto kvm = std::move(kvm_or).value();
  const RecordIdentity id = MakeRecordIdentity(config, options.fingerprint);
  ScratchDir dir("kv");
  auto m = OffloadManager::Create(Config(1 << 20, dir.path()), id);
  kvm->SetEvictionCallback([&](int g, kv::BlockId block, const kv::BlockHash& hash) {
    m->Store({hash, g}, std::span(kvm->arena(g).BlockData(block),
                                  static_cast<size_t>(kvm->arena(g).block_bytes())));
  });
  // Prompt A: 16 tokens = 4 blocks; fill every block of every group with seeded bytes.
  std::vector<kv::TokenId> a(17);
  std::iota(a.begin(), a.end(), 100);
  kv::PrefixHit hit = kvm->FindLongestCachedPrefix(a, "");
  const std::vector<kv::BlockHash> hashes = hit.block_hashes;
  ASSERT_TRUE(kvm->AllocateNew(1, std::move(hit), 17).has_value());
  std::map<std::pair<int, int>, Bytes> original;  // (group, block index) -> bytes
  for (int g = 0; g < 2; ++g) {
    const auto& table = kvm->BlockTable(1, g);
    for (int b = 0; b < 4; ++b) {
      Bytes bytes = testing::RandomBytes(kvm->arena(g).block_bytes(), g * 100 + b);
      std::memcpy(kvm->arena(g).BlockData(table[b]), bytes.data(), bytes.size());
      original[{g, b}] = bytes;
    }
  }
  kvm->CacheFullBlocks(1, a, 17);
  kvm->Free(1);
  // Other prompts push A out of the device pool.
  for (int r = 0; r < 6; ++r) {
    std::vector<kv::TokenId> other(17);
    std::iota(other.begin(), other.end(), 1000 * (r + 1));
    kv::PrefixHit h = kvm->FindLongestCachedPrefix(other, "");
    ASSERT_TRUE(kvm->AllocateNew(10 + r, std::move(h), 17).has_value());
    kvm->CacheFullBlocks(10 + r, other, 17);
    kvm->Free(10 + r);
  }
  ASSERT_EQ(kvm->FindLongestCachedPrefix(a, "").num_cached_tokens, 0) << "A still on device";
  for (int g = 0; g < 2; ++g) {
    std::vector<BlockKey> keys;
    for (const kv::BlockHash& h : hashes) keys.push_back({h, g});
    EXPECT_EQ(m->CountAvailable(keys), 4u) << "group " << g;
    Loaded r = Load(*m, keys);
    ASSERT_EQ(r.result.num_loaded, 4u);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(r.blocks[b], (original[{g, b}])) << g << "," << b;
  }
}

}  // namespace
}  // namespace kvserve::offload
