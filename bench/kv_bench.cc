// KV manager costs per 1M tokens (block size 16, bookkeeping only: no arena memory).
//   BM_HashBlocks         xxh3-128 chain over 1M tokens
//   BM_PrefixLookup       FindLongestCachedPrefix of a fully cached 1M-token prompt (hashing
//                         included), dense and full+sliding hybrid
//   BM_AllocatePrefill    AllocateNew of 1M tokens in one call, then Free
//   BM_AllocateDecode     AllocateSlots one token at a time up to 1M tokens, then Free
// items_per_second counts tokens.
#include <benchmark/benchmark.h>

#include <numeric>

#include "core/units.h"
#include "kv/kv_cache_manager.h"

namespace kvserve::kv {
namespace {

constexpr int64_t kTokens = 1 << 20;

KvCacheConfig BenchConfig(bool hybrid) {
  KvCacheConfig config;
  config.block_size = 16;
  config.max_model_len = kTokens + 16;
  config.max_chunk_tokens = 2048;
  if (!hybrid) {
    config.num_layers = 5;
    config.groups.push_back({FullAttention{4, 8, tensor::DType::kF16}, {0, 1, 2, 3, 4}, {}});
    return config;
  }
  config.num_layers = 2;
  config.groups.push_back({FullAttention{4, 8, tensor::DType::kF16}, {0}, {}});
  config.groups.push_back({SlidingWindow{128, 4, 8, tensor::DType::kF16}, {1}, {}});
  return config;
}

std::unique_ptr<KvCacheManager> BenchManager(bool hybrid) {
  KvCacheManagerOptions options;
  options.allocate_memory = false;
  options.fingerprint.block_size = 16;
  auto m = KvCacheManager::Create(BenchConfig(hybrid), 4 * kGiB, options);
  CHECK(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<TokenId> Prompt() {
  std::vector<TokenId> tokens(kTokens + 1);
  std::iota(tokens.begin(), tokens.end(), 1);
  return tokens;
}

void BM_HashBlocks(benchmark::State& state) {
  const std::vector<TokenId> tokens = Prompt();
  const BlockHash root = RootHash(ModelFingerprint{});
  for (auto _ : state) {
    std::vector<BlockHash> hashes;
    hashes.reserve(kTokens / 16 + 1);
    ExtendBlockHashes(root, tokens, 16, "", &hashes);
    benchmark::DoNotOptimize(hashes.data());
  }
  state.SetItemsProcessed(state.iterations() * kTokens);
}
BENCHMARK(BM_HashBlocks)->Unit(benchmark::kMillisecond);

// Computes `prompt` in 2048-token chunks (the sliding pool is sized for that chunk), caches
// its blocks and frees it: every block stays cached in the free queue.
void Prefill(KvCacheManager& m, const std::vector<TokenId>& prompt) {
  constexpr int64_t kChunk = 2048;
  const int64_t len = static_cast<int64_t>(prompt.size());
  CHECK(m.AllocateNew(1, m.FindLongestCachedPrefix(prompt, ""), kChunk).has_value());
  m.CacheFullBlocks(1, prompt, kChunk);
  for (int64_t c = kChunk; c < len; c += kChunk) {
    const int64_t n = std::min(kChunk, len - c);
    CHECK(m.AllocateSlots(1, c, n).has_value());
    m.CacheFullBlocks(1, prompt, c + n);
  }
  m.Free(1);
}

void BM_PrefixLookup(benchmark::State& state) {
  const bool hybrid = state.range(0) != 0;
  auto m = BenchManager(hybrid);
  const std::vector<TokenId> prompt = Prompt();
  Prefill(*m, prompt);
  for (auto _ : state) {
    PrefixHit hit = m->FindLongestCachedPrefix(prompt, "");
    CHECK_EQ(hit.num_cached_tokens, kTokens);
    benchmark::DoNotOptimize(hit);
  }
  state.SetItemsProcessed(state.iterations() * kTokens);
  state.SetLabel(hybrid ? "full+sliding(128)" : "full");
}
BENCHMARK(BM_PrefixLookup)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_AllocatePrefill(benchmark::State& state) {
  auto m = BenchManager(false);
  PrefixHit empty;
  empty.blocks_per_group.resize(1);
  for (auto _ : state) {
    CHECK(m->AllocateNew(1, empty, kTokens).has_value());
    m->Free(1);
  }
  state.SetItemsProcessed(state.iterations() * kTokens);
}
BENCHMARK(BM_AllocatePrefill)->Unit(benchmark::kMillisecond);

void BM_AllocateDecode(benchmark::State& state) {
  const bool hybrid = state.range(0) != 0;
  auto m = BenchManager(hybrid);
  PrefixHit empty;
  empty.blocks_per_group.resize(m->num_groups());
  for (auto _ : state) {
    CHECK(m->AllocateNew(1, empty, 1).has_value());
    for (int64_t c = 1; c < kTokens; ++c) CHECK(m->AllocateSlots(1, c, 1).has_value());
    m->Free(1);
  }
  state.SetItemsProcessed(state.iterations() * kTokens);
  state.SetLabel(hybrid ? "full+sliding(128)" : "full");
}
BENCHMARK(BM_AllocateDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve::kv

BENCHMARK_MAIN();
