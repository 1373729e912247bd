#include "offload/redis_tier.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "offload/redis_server.h"
#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;
using testing::PayloadFor;
using testing::TestIdentity;

class RedisTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisServer::Available()) {
      GTEST_SKIP() << "redis-server not found at " << testing::kRedisServerPath
                   << ": install redis-server to run the Redis tier tests";
    }
    server_ = std::make_unique<testing::RedisServer>();
    ASSERT_TRUE(server_->running()) << "redis-server did not start";
  }
  RedisAddress Address() const { return {"127.0.0.1", server_->port(), 0}; }
  std::unique_ptr<testing::RedisServer> server_;
};

TEST(RedisUrlTest, Parses) {
  Result<RedisAddress> a = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "localhost");
  EXPECT_EQ(a->port, 6379);
  EXPECT_FALSE(ParseRedisUrl("redis://:6379").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://h:x").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://user@h:1").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://h:1/x").ok());
}

// Two tiers (two servers) share one Redis: what one stores the other reads, exactly.
TEST_F(RedisTierTest, SharedBetweenTwoClients) {
  const RecordIdentity id = TestIdentity();
  RedisTier a(Address(), id), b(Address(), id);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a.Put(Key(i, i % 2), PayloadFor(id, i, i % 2)).ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(b.Contains(Key(i, i % 2)));
    Result<std::optional<Bytes>> got = b.Get(Key(i, i % 2));
    ASSERT_TRUE(got.ok() && got->has_value()) << i;
    EXPECT_EQ(**got, PayloadFor(id, i, i % 2));
  }
  std::vector<BlockKey> run = {Key(0), Key(2), Key(4), Key(50), Key(6)};
  EXPECT_EQ(b.CountLeadingPresent(run), 3u);
  Result<std::optional<Bytes>> miss = b.Get(Key(50));
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  // Another model's tier shares the server but never the keys.
  RedisTier other(Address(), TestIdentity("other"));
  EXPECT_FALSE(other.Contains(Key(0)));
  EXPECT_EQ(a.Stats().stores, 10);
  EXPECT_EQ(b.Stats().hits, 10);
}

// A value that fails its checks (a flipped payload byte, a record of another block) is
// deleted and reported as a miss.
TEST_F(RedisTierTest, CorruptValueIsDeletedAndMissed) {
  const RecordIdentity id = TestIdentity();
  RedisTier tier(Address(), id);
  redisContext* c = redisConnect("127.0.0.1", server_->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  Bytes flipped = EncodeRecord(id, Key(1), PayloadFor(id, 1));
  flipped.back() ^= std::byte{1};
  const Bytes other_block = EncodeRecord(id, Key(2), PayloadFor(id, 2));
  const std::vector<std::pair<BlockKey, const Bytes*>> cases = {{Key(1), &flipped},
                                                                {Key(3), &other_block}};
  for (const auto& [key, value] : cases) {
    const std::string name = tier.RedisKey(key);
    freeReplyObject(redisCommand(c, "SET %b %b", name.data(), name.size(), value->data(),
                                 value->size()));
    Result<std::optional<Bytes>> got = tier.Get(key);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->has_value());
    EXPECT_FALSE(tier.Contains(key)) << "not deleted";
  }
  EXPECT_EQ(tier.Stats().failed_checksums, 2);
  redisFree(c);
}

TEST_F(RedisTierTest, DeadRedisIsCountedAndServedAround) {
  const RecordIdentity id = TestIdentity();
  RedisTier tier(Address(), id);
  ASSERT_TRUE(tier.Put(Key(1), PayloadFor(id, 1)).ok());
  server_->Kill();
  Status put = tier.Put(Key(2), PayloadFor(id, 2));
  EXPECT_EQ(put.code(), StatusCode::kUnavailable);
  Result<std::optional<Bytes>> got = tier.Get(Key(1));
  EXPECT_TRUE(!got.ok() || !got->has_value());
  EXPECT_FALSE(tier.Contains(Key(1)));
  EXPECT_GE(tier.Stats().errors, 1);
  // Backoff: a burst of calls while down costs no new connection attempts per call.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) (void)tier.Put(Key(i), PayloadFor(id, i));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(RedisTierTest, ReconnectsAfterRestart) {
  const RecordIdentity id = TestIdentity();
  RedisTier tier(Address(), id);
  const int port = server_->port();
  server_.reset();
  EXPECT_FALSE(tier.Put(Key(1), PayloadFor(id, 1)).ok());
  server_ = std::make_unique<testing::RedisServer>(port);
  ASSERT_TRUE(server_->running());
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past the first backoff
  EXPECT_TRUE(tier.Put(Key(1), PayloadFor(id, 1)).ok());
  Result<std::optional<Bytes>> got = tier.Get(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, PayloadFor(id, 1));
}

}  // namespace
}  // namespace kvserve::offload
