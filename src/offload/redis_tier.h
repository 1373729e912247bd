// RedisTier: block records in a Redis server that a fleet of kvserve processes shares.
//
// Key "kvserve:<FingerprintDigest>:<BlockKey::ToString()>", value one record
// (offload/record.h), written with SET NX (same key, same bytes). A value that fails its
// checks is deleted (DEL), counted in failed_checksums and reported as a miss.
// Connection or command failures are counted in errors, logged (1st, 2nd, 4th, ... time) and
// reported as Unavailable; after a failure no connection is attempted for a backoff that
// doubles from 50 ms up to 5 s and resets on the next success, so a dead Redis costs one
// failed attempt per backoff period, not one per block.
//
// Owns: a pool of hiredis connections (one per concurrent caller at most). Thread safety: all
// methods are thread-safe; a connection is used by one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offload/record.h"
#include "offload/tier.h"

struct redisContext;

namespace kvserve::offload {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
};

// "redis://host:port[/db]" (port defaults to 6379). InvalidArgument otherwise.
Result<RedisAddress> ParseRedisUrl(std::string_view url);

class RedisTier final : public Tier {
 public:
  RedisTier(RedisAddress address, RecordIdentity identity);
  ~RedisTier() override;

  TierKind kind() const override { return TierKind::kRedis; }
  Status Put(const BlockKey& key, std::span<const std::byte> bytes) override;
  Result<std::optional<Bytes>> Get(const BlockKey& key) override;
  bool Contains(const BlockKey& key) override;
  // How many leading keys of `keys` the server holds (one pipelined round trip).
  size_t CountLeadingPresent(std::span<const BlockKey> keys);

  std::string RedisKey(const BlockKey& key) const;

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const;
  };
  using Context = std::unique_ptr<redisContext, ContextDeleter>;

  Result<Context> Acquire();
  void Release(Context context);
  // Counts, logs and starts the backoff; returns Unavailable(what).
  Status Fail(const std::string& what);

  const RedisAddress address_;
  const RecordIdentity identity_;
  const std::string key_prefix_;
  std::mutex mu_;
  std::vector<Context> idle_;
  std::chrono::steady_clock::time_point retry_after_{};
  std::chrono::milliseconds backoff_{0};
};

}  // namespace kvserve::offload
