// Randomized allocate / prefill / decode / free / evict sequences with fixed seeds.
// After every step: CheckIntegrity() (no leak, no double free, ref counts == table entries,
// capacity never exceeded), and the KV bytes every running request can still read are its own
// tokens: each computed token writes (token id, position) into its K row, and reads of the
// request's live window (and of every prefix hit) must find exactly those values.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "kv/kv_cache_manager.h"
#include "kv/test_configs.h"

namespace kvserve::kv {
namespace {

struct Req {
  std::vector<TokenId> tokens;  // prompt, then sampled tokens
  int64_t num_computed = 0;
  int64_t max_len = 0;
};

class Driver {
 public:
  Driver(const KvCacheConfig& config, uint64_t budget, uint32_t seed, bool memory)
      : config_(config), rng_(seed), memory_(memory) {
    KvCacheManagerOptions options;
    options.allocate_memory = memory;
    options.fingerprint = testing::TestFingerprint(config, "rand");
    auto m = KvCacheManager::Create(config, budget, options);
    CHECK(m.ok()) << m.status().ToString();
    m_ = std::move(m).value();
    for (int p = 0; p < 3; ++p)
      prefixes_.push_back(RandomTokens(Uniform(0, 3 * config.block_size)));
  }

  void Step() {
    const int op = Uniform(0, 9);
    if (op <= 2 || reqs_.empty()) {
      NewRequest();
    } else if (op <= 7) {
      Advance(Pick());
    } else {
      Finish(Pick());
    }
    const Status s = m_->CheckIntegrity();
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int g = 0; g < m_->num_groups(); ++g) {
      ASSERT_LE(m_->pool(g).NumFreeBlocks(), m_->pool(g).NumUsableBlocks());
    }
    if (memory_) {
      for (const auto& [id, r] : reqs_) VerifyLive(id, r);
    }
  }

  void FreeAll() {
    while (!reqs_.empty()) Finish(reqs_.begin()->first);
    for (int g = 0; g < m_->num_groups(); ++g) {
      EXPECT_EQ(m_->pool(g).NumFreeBlocks(), m_->pool(g).NumUsableBlocks()) << "leak in " << g;
    }
    EXPECT_TRUE(m_->CheckIntegrity().ok());
  }

  int64_t hits() const { return hit_tokens_; }
  int64_t preemptions() const { return preemptions_; }
  int64_t started() const { return num_started_; }
  const KvCacheManager& manager() const { return *m_; }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::vector<TokenId> RandomTokens(int n) {
    std::vector<TokenId> v(n);
    for (TokenId& t : v) t = Uniform(0, 50);  // small vocabulary: repeats happen
    return v;
  }
  RequestId Pick() {
    auto it = reqs_.begin();
    std::advance(it, Uniform(0, static_cast<int>(reqs_.size()) - 1));
    return it->first;
  }
  int64_t Chunk(int64_t remaining) { return std::min<int64_t>(remaining, Uniform(1, 20)); }

  void NewRequest() {
    Req r;
    r.tokens = prefixes_[Uniform(0, 2)];
    const std::vector<TokenId> tail = RandomTokens(Uniform(1, 30));
    r.tokens.insert(r.tokens.end(), tail.begin(), tail.end());
    r.max_len = std::min<int64_t>(config_.max_model_len,
                                  static_cast<int64_t>(r.tokens.size()) + Uniform(0, 30));
    const std::string salt = Uniform(0, 4) == 0 ? "salt" : "";
    PrefixHit hit = m_->FindLongestCachedPrefix(r.tokens, salt);
    if (memory_) VerifyHit(hit, r.tokens);
    const int64_t cached = hit.num_cached_tokens;
    const int64_t chunk = Chunk(static_cast<int64_t>(r.tokens.size()) - cached);
    const RequestId id = next_id_++;
    if (!m_->AllocateNew(id, std::move(hit), chunk).has_value()) {
      ASSERT_FALSE(m_->HasRequest(id));
      return;
    }
    hit_tokens_ += cached;
    ++num_started_;
    r.num_computed = cached;
    Req& stored = reqs_[id] = std::move(r);
    Compute(id, stored, chunk);
  }

  void Advance(RequestId id) {
    Req& r = reqs_[id];
    const int64_t n = Chunk(static_cast<int64_t>(r.tokens.size()) - r.num_computed);
    if (!m_->AllocateSlots(id, r.num_computed, n).has_value()) {
      ++preemptions_;  // the scheduler would preempt and recompute later
      Finish(id);
      return;
    }
    Compute(id, r, n);
  }

  // Writes the KV of tokens [num_computed, num_computed + n), caches full blocks, and
  // samples a token when the request caught up. May finish (erase) the request.
  void Compute(RequestId id, Req& r, int64_t n) {
    if (memory_) {
      for (int64_t p = r.num_computed; p < r.num_computed + n; ++p) Write(id, p, r.tokens[p]);
    }
    r.num_computed += n;
    m_->CacheFullBlocks(id, r.tokens, r.num_computed);
    if (r.num_computed == static_cast<int64_t>(r.tokens.size()) &&
        static_cast<int64_t>(r.tokens.size()) < r.max_len) {
      r.tokens.push_back(Uniform(0, 50));
    }
    if (r.num_computed == r.max_len) Finish(id);
  }

  void Finish(RequestId id) {
    m_->Free(id);
    reqs_.erase(id);
  }

  // KV-view groups only (full and sliding): layer l of group g writes (token, position).
  template <class Fn>
  void ForEachKvLayer(Fn fn) const {
    for (int g = 0; g < m_->num_groups(); ++g) {
      if (std::holds_alternative<CompressedLatent>(config_.groups[g].spec)) continue;
      const tensor::PagedKvView view = m_->KvView(g);
      const auto* sliding = std::get_if<SlidingWindow>(&config_.groups[g].spec);
      fn(g, view, config_.groups[g].layers.front(), sliding ? sliding->window : 0);
    }
  }
  void Write(RequestId id, int64_t pos, TokenId token) {
    ForEachKvLayer([&](int g, const tensor::PagedKvView& view, int layer, int) {
      const BlockId b = m_->BlockTable(id, g).at(pos / config_.block_size);
      ASSERT_NE(b, kNullBlock);
      const float values[2] = {static_cast<float>(token), static_cast<float>(pos)};
      std::memcpy(view.KSegment(layer, b, pos % config_.block_size, 0), values, sizeof(values));
    });
  }
  void Expect(const tensor::PagedKvView& view, int layer, BlockId b, int64_t pos,
              TokenId token) const {
    float values[2];
    std::memcpy(values, view.KSegment(layer, b, pos % config_.block_size, 0), sizeof(values));
    ASSERT_EQ(values[0], static_cast<float>(token)) << "position " << pos << " block " << b;
    ASSERT_EQ(values[1], static_cast<float>(pos));
  }
  // Tokens [from, to) a group must still hold: all for full, the last window for sliding.
  static int64_t From(int window, int64_t to) {
    return window ? std::max<int64_t>(0, to - window) : 0;
  }

  void VerifyLive(RequestId id, const Req& r) const {
    ForEachKvLayer([&](int g, const tensor::PagedKvView& view, int layer, int window) {
      const std::vector<BlockId>& table = m_->BlockTable(id, g);
      for (int64_t p = From(window, r.num_computed); p < r.num_computed; ++p) {
        Expect(view, layer, table.at(p / config_.block_size), p, r.tokens[p]);
      }
    });
  }
  void VerifyHit(const PrefixHit& hit, const std::vector<TokenId>& tokens) const {
    ForEachKvLayer([&](int g, const tensor::PagedKvView& view, int layer, int window) {
      for (int64_t p = From(window, hit.num_cached_tokens); p < hit.num_cached_tokens; ++p) {
        Expect(view, layer, hit.blocks_per_group[g].at(p / config_.block_size), p, tokens[p]);
      }
    });
  }

  KvCacheConfig config_;
  std::mt19937 rng_;
  bool memory_;
  std::unique_ptr<KvCacheManager> m_;
  std::vector<std::vector<TokenId>> prefixes_;
  std::map<RequestId, Req> reqs_;
  RequestId next_id_ = 1;
  int64_t hit_tokens_ = 0;
  int64_t preemptions_ = 0;
  int64_t num_started_ = 0;
};

TEST(RandomizedTest, HybridFullAndSlidingWithContentChecks) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(seed);
    KvCacheConfig config = testing::SmallHybrid(4, 8, 96);
    config.max_chunk_tokens = 20;
    Driver d(config, 24 * 1024, seed, /*memory=*/true);
    for (int step = 0; step < 1500; ++step) {
      d.Step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(d.started(), 200);
    EXPECT_GT(d.hits(), 0);         // the shared prefixes were reused
    EXPECT_GT(d.preemptions(), 0);  // and the pools ran out
    EXPECT_GT(d.manager().Stats().num_evictions, 0);
    d.FreeAll();
  }
}

TEST(RandomizedTest, DenseBlockSizeOne) {
  KvCacheConfig config = testing::DenseConfig(2, 1, 4, tensor::DType::kF32, 1, 64);
  Driver d(config, 8 * 1024, 7, true);
  for (int step = 0; step < 1000 && !::testing::Test::HasFatalFailure(); ++step) d.Step();
  EXPECT_GT(d.started(), 100);
  EXPECT_GT(d.hits(), 0);
  d.FreeAll();
}

TEST(RandomizedTest, V41LikeBookkeepingOnly) {
  for (uint32_t seed : {11u, 12u}) {
    SCOPED_TRACE(seed);
    KvCacheConfig config = testing::V41Like(16, 128);
    config.max_chunk_tokens = 20;
    Driver d(config, 6 * 1024 * 1024, seed, /*memory=*/false);
    for (int step = 0; step < 1500 && !::testing::Test::HasFatalFailure(); ++step) d.Step();
    EXPECT_GT(d.hits(), 0);
    d.FreeAll();
  }
}

}  // namespace
}  // namespace kvserve::kv
