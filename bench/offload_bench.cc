// KV tier loads into device blocks, the path a prefix reload takes
// (TieredKvConnector::StartLoad, then PollLoads until the load is reported), for the 110m
// preset's block (12 layers x 12 kv heads x 64 dims, f16, 16 tokens: 589,824 B):
//   BM_CpuTierLoad/<blocks>    blocks stored in the CPU tier, loaded into device blocks that
//                              have been written before (a warm arena)
//   BM_FileTierLoad/<blocks>   the same blocks from the file tier (a directory under /tmp,
//                              page cache warm: the copy and checksum path, not the disk)
// bytes_per_second = KV bytes delivered into device blocks per second. Compare with
// BM_MemoryCopy (one thread's memcpy of the same bytes) and the machine's memory bandwidth.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/check.h"
#include "core/stream_copy.h"
#include "core/units.h"
#include "kv/kv_cache_manager.h"
#include "offload/tiered_connector.h"

namespace kvserve::offload {
namespace {

kv::KvCacheConfig Config110m() {
  kv::KvCacheConfig config;
  config.num_layers = 12;
  config.block_size = 16;
  config.max_model_len = 32768;
  kv::KvCacheGroup group;
  group.spec = kv::FullAttention{12, 64, tensor::DType::kF16};
  for (int l = 0; l < 12; ++l) group.layers.push_back(l);
  config.groups.push_back(group);
  return config;
}

struct Setup {
  std::unique_ptr<kv::KvCacheManager> kv;
  std::unique_ptr<TieredKvConnector> connector;
  std::vector<kv::BlockLoad> loads;
};

// `blocks` blocks with distinct hashes stored in the tier(s) of `oc`, and as many device
// blocks (ids 1..blocks) to load them into, written once so the arena's pages exist.
Setup MakeSetup(int blocks, const OffloadConfig& oc) {
  Setup s;
  const kv::KvCacheConfig config = Config110m();
  kv::KvCacheManagerOptions options;
  options.fingerprint = {"bench", "llama", kv::DescribeKvFormats(config), 16};
  const uint64_t block_bytes = kv::GroupBlockBytes(config, 0);
  auto kv = kv::KvCacheManager::Create(config, block_bytes * (blocks + 2), options);
  CHECK(kv.ok()) << kv.status().ToString();
  s.kv = std::move(kv).value();
  auto manager = OffloadManager::Create(oc, MakeRecordIdentity(config, options.fingerprint));
  std::vector<std::byte> payload(block_bytes);
  for (int i = 0; i < blocks; ++i) {
    for (size_t b = 0; b < payload.size(); b += 4096) payload[b] = static_cast<std::byte>(i + b);
    const kv::BlockHash hash{static_cast<uint64_t>(i) + 1, 77};
    manager->WriteThrough({hash, 0}, payload);
    manager->StoreToCpu({hash, 0}, payload);
    s.loads.push_back({0, i, i + 1, hash});
    std::memset(s.kv->arena(0).BlockData(i + 1), 1, block_bytes);
  }
  manager->Flush();
  s.connector = std::make_unique<TieredKvConnector>(std::move(manager), s.kv.get());
  return s;
}

void Load(benchmark::State& state, Setup& s) {
  kv::RequestId id = 1;
  for (auto _ : state) {
    s.connector->StartLoad(id, s.loads);
    size_t loaded = 0;
    for (bool done = false; !done;) {
      for (const kv::FinishedLoad& f : s.connector->PollLoads(std::chrono::milliseconds(5))) {
        done = f.id == id;
        loaded = f.num_loaded;
      }
    }
    CHECK_EQ(loaded, s.loads.size());
    ++id;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.loads.size()) *
                          s.kv->arena(0).block_bytes());
}

void BM_CpuTierLoad(benchmark::State& state) {
  OffloadConfig oc;
  oc.cpu_bytes_to_use = 8 * kGiB;
  Setup s = MakeSetup(static_cast<int>(state.range(0)), oc);
  Load(state, s);
}
BENCHMARK(BM_CpuTierLoad)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FileTierLoad(benchmark::State& state) {
  const std::string root =
      (std::filesystem::temp_directory_path() / ("kvserve-offload-bench-" + std::to_string(getpid())))
          .string();
  {
    OffloadConfig oc;
    oc.spec_name = "TieringOffloadingSpec";
    oc.cpu_bytes_to_use = 0;
    oc.file = FileTierConfig{root, 4, 4};
    Setup s = MakeSetup(static_cast<int>(state.range(0)), oc);
    Load(state, s);
  }
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_FileTierLoad)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

// One thread copying the same bytes between two warm buffers: the ceiling of a single copier.
void BM_MemoryCopy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * 589824;
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes, std::byte{2});
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MemoryCopy)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same copy with StreamCopy (streaming stores), the CPU tier's copy into device blocks.
void BM_StreamCopy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * 589824;
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes, std::byte{2});
  for (auto _ : state) {
    StreamCopy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_StreamCopy)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve::offload

BENCHMARK_MAIN();
