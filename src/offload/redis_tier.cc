#include "offload/redis_tier.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "core/log.h"

namespace kvserve::offload {
namespace {

constexpr auto kMinBackoff = std::chrono::milliseconds(50);
constexpr auto kMaxBackoff = std::chrono::milliseconds(5000);
constexpr timeval kConnectTimeout = {0, 500 * 1000};
constexpr timeval kCommandTimeout = {2, 0};

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool ParseInt(std::string_view text, int* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

Result<RedisAddress> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) {
    return InvalidArgument(fmt::format("redis url '{}' must start with redis://", url));
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisAddress address;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (!ParseInt(rest.substr(slash + 1), &address.db) || address.db < 0) {
      return InvalidArgument(fmt::format("redis url '{}': bad database number", url));
    }
    rest = rest.substr(0, slash);
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!ParseInt(rest.substr(colon + 1), &address.port) || address.port <= 0 ||
        address.port > 65535) {
      return InvalidArgument(fmt::format("redis url '{}': bad port", url));
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty() || rest.find('@') != std::string_view::npos) {
    return InvalidArgument(fmt::format("redis url '{}': expected redis://host:port[/db]", url));
  }
  address.host = std::string(rest);
  return address;
}

void RedisTier::ContextDeleter::operator()(redisContext* c) const { redisFree(c); }

RedisTier::RedisTier(RedisAddress address, RecordIdentity identity)
    : address_(std::move(address)),
      identity_(std::move(identity)),
      key_prefix_("kvserve:" + FingerprintDigest(identity_.fingerprint) + ":") {}

RedisTier::~RedisTier() = default;

std::string RedisTier::RedisKey(const BlockKey& key) const { return key_prefix_ + key.ToString(); }

Status RedisTier::Fail(const std::string& what) {
  const int64_t n = counters_.errors.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    backoff_ = backoff_.count() == 0 ? kMinBackoff : std::min(backoff_ * 2, kMaxBackoff);
    retry_after_ = std::chrono::steady_clock::now() + backoff_;
  }
  if ((n & (n - 1)) == 0) {
    KV_LOG(WARNING, "offload redis tier {}:{}: {} ({} failures so far)", address_.host,
           address_.port, what, n + 1);
  }
  return Unavailable("redis: " + what);
}

Result<RedisTier::Context> RedisTier::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Context c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    if (std::chrono::steady_clock::now() < retry_after_) {
      return Unavailable("redis: backing off after a failure");
    }
  }
  Context c(redisConnectWithTimeout(address_.host.c_str(), address_.port, kConnectTimeout));
  if (!c || c->err) return Fail(fmt::format("connect: {}", c ? c->errstr : "out of memory"));
  redisSetTimeout(c.get(), kCommandTimeout);
  if (address_.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "SELECT %d", address_.db)));
    if (!r || r->type == REDIS_REPLY_ERROR) return Fail("SELECT failed");
  }
  return c;
}

void RedisTier::Release(Context context) {
  std::lock_guard<std::mutex> lock(mu_);
  backoff_ = std::chrono::milliseconds(0);
  idle_.push_back(std::move(context));
}

Status RedisTier::Put(const BlockKey& key, std::span<const std::byte> bytes) {
  const auto start = std::chrono::steady_clock::now();
  KV_ASSIGN_OR_RETURN(Context c, Acquire());
  const Bytes record = EncodeRecord(identity_, key, bytes);
  const std::string redis_key = RedisKey(key);
  Reply r(static_cast<redisReply*>(redisCommand(c.get(), "SET %b %b NX", redis_key.data(),
                                                redis_key.size(), record.data(),
                                                record.size())));
  if (!r) return Fail(fmt::format("SET: {}", c->errstr));
  if (r->type == REDIS_REPLY_ERROR) {
    Release(std::move(c));
    return Fail(fmt::format("SET: {}", std::string(r->str, r->len)));
  }
  Release(std::move(c));
  if (r->type == REDIS_REPLY_STATUS) {  // "OK": newly stored (nil: already there)
    counters_.stores.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_stored.fetch_add(static_cast<int64_t>(bytes.size()),
                                     std::memory_order_relaxed);
  }
  counters_.store_latency.Observe(SecondsSince(start));
  return Status::Ok();
}

Result<std::optional<Bytes>> RedisTier::Get(const BlockKey& key) {
  const auto start = std::chrono::steady_clock::now();
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  KV_ASSIGN_OR_RETURN(Context c, Acquire());
  const std::string redis_key = RedisKey(key);
  Reply r(static_cast<redisReply*>(
      redisCommand(c.get(), "GET %b", redis_key.data(), redis_key.size())));
  if (!r) return Fail(fmt::format("GET: {}", c->errstr));
  if (r->type == REDIS_REPLY_NIL) {
    Release(std::move(c));
    return std::optional<Bytes>();
  }
  if (r->type != REDIS_REPLY_STRING) {
    Release(std::move(c));
    return Fail("GET: unexpected reply type");
  }
  std::span<const std::byte> record(reinterpret_cast<const std::byte*>(r->str), r->len);
  Result<std::span<const std::byte>> payload = DecodeRecord(identity_, key, record);
  if (!payload.ok()) {
    counters_.failed_checksums.fetch_add(1, std::memory_order_relaxed);
    KV_LOG(WARNING, "offload redis tier: deleting {}: {}", redis_key,
           payload.status().ToString());
    Reply del(static_cast<redisReply*>(
        redisCommand(c.get(), "DEL %b", redis_key.data(), redis_key.size())));
    if (del) Release(std::move(c));
    return std::optional<Bytes>();
  }
  Release(std::move(c));
  Bytes out(payload->begin(), payload->end());
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.loads.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_loaded.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
  counters_.load_latency.Observe(SecondsSince(start));
  return std::optional<Bytes>(std::move(out));
}

bool RedisTier::Contains(const BlockKey& key) {
  return CountLeadingPresent(std::span<const BlockKey>(&key, 1)) == 1;
}

size_t RedisTier::CountLeadingPresent(std::span<const BlockKey> keys) {
  if (keys.empty()) return 0;
  counters_.lookups.fetch_add(static_cast<int64_t>(keys.size()), std::memory_order_relaxed);
  Result<Context> c = Acquire();
  if (!c.ok()) return 0;
  for (const BlockKey& key : keys) {
    const std::string redis_key = RedisKey(key);
    redisAppendCommand(c->get(), "EXISTS %b", redis_key.data(), redis_key.size());
  }
  size_t leading = 0;
  bool still_leading = true;
  for (size_t i = 0; i < keys.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c->get(), &raw) != REDIS_OK) {
      (void)Fail(fmt::format("EXISTS: {}", (*c)->errstr));
      return 0;
    }
    Reply r(static_cast<redisReply*>(raw));
    const bool present = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    still_leading = still_leading && present;
    if (still_leading) ++leading;
  }
  Release(std::move(*c));
  return leading;
}

}  // namespace kvserve::offload
