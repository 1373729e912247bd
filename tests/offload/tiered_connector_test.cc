// TieredKvConnector::Contains remembers answers: a request waiting for room repeats its prefix
// lookup every step, and without the memo each repeat costs one Redis round trip per block.
// A real redis-server on loopback; a block written by "another server" is seen once the memo
// expires.
#include "offload/tiered_connector.h"

#include <gtest/gtest.h>

#include <thread>

#include "kv/kv_cache_manager.h"
#include "offload/redis_server.h"
#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;
using testing::PayloadFor;
using testing::TestIdentity;

std::unique_ptr<kv::KvCacheManager> SmallKvManager() {
  kv::KvCacheConfig config;
  config.num_layers = 1;
  config.block_size = 16;
  config.max_model_len = 64;
  config.groups.push_back({kv::FullAttention{1, 2, tensor::DType::kF32}, {0}, {}});
  kv::KvCacheManagerOptions options;
  options.allocate_memory = false;
  options.fingerprint.block_size = 16;
  return std::move(kv::KvCacheManager::Create(config, 8 * kv::GroupBlockBytes(config, 0), options))
      .value();
}

TEST(TieredConnectorTest, RepeatedLookupsCostOneRedisRoundTripPerMemoPeriod) {
  if (!testing::RedisServer::Available()) {
    GTEST_SKIP() << "redis-server not found at " << testing::kRedisServerPath;
  }
  testing::RedisServer server;
  ASSERT_TRUE(server.running()) << "redis-server did not start";
  std::unique_ptr<kv::KvCacheManager> kv = SmallKvManager();
  OffloadConfig config;
  config.spec_name = "TieringOffloadingSpec";
  config.cpu_bytes_to_use = 4096;
  config.redis = RedisTierConfig{"", RedisAddress{"127.0.0.1", server.port(), 0}};
  const RecordIdentity id = TestIdentity();
  std::unique_ptr<OffloadManager> owned = OffloadManager::Create(config, id);
  OffloadManager& manager = *owned;
  ASSERT_NE(manager.redis_tier(), nullptr);
  TieredKvConnector connector(std::move(owned), kv.get());
  const BlockKey key = Key(7);
  auto redis_lookups = [&] { return manager.redis_tier()->counters().lookups.load(); };

  for (int i = 0; i < 5; ++i) EXPECT_FALSE(connector.Contains(key.group, key.hash));
  EXPECT_EQ(redis_lookups(), 1);

  // Another server writes the block to Redis: remembered as absent until the memo expires.
  const Bytes payload = PayloadFor(id, 7);
  manager.WriteThrough(key, payload);
  manager.Flush();
  EXPECT_FALSE(connector.Contains(key.group, key.hash));
  EXPECT_EQ(redis_lookups(), 1);
  std::this_thread::sleep_for(TieredKvConnector::kContainsMemo + std::chrono::milliseconds(50));
  EXPECT_TRUE(connector.Contains(key.group, key.hash));
  EXPECT_TRUE(connector.Contains(key.group, key.hash));
  EXPECT_EQ(redis_lookups(), 2);
}

}  // namespace
}  // namespace kvserve::offload
