// MeasureTierSpeeds (sim/calibrate.h): the real offload tiers, timed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <fmt/format.h>

#include "offload/offload_manager.h"
#include "sim/calibrate.h"

namespace kvserve::sim {
namespace {

constexpr int kBlocks = 64;
constexpr int kRepeats = 5;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::vector<offload::BlockKey> Keys(int n, uint64_t salt) {
  std::vector<offload::BlockKey> keys;
  for (int i = 0; i < n; ++i) keys.push_back({kv::BlockHash{salt + i, salt ^ 0xC0FFEEull}, 0});
  return keys;
}

// Median seconds to load `keys` into device-sized destinations (block i of `dest`), as
// TieredKvConnector does: the read threads copy each block straight into its destination.
double TimeLoad(offload::OffloadManager& m, const std::vector<offload::BlockKey>& keys,
                std::vector<std::byte>& dest) {
  const size_t block_bytes = dest.size() / kBlocks;
  std::vector<double> runs;
  for (int r = 0; r < kRepeats; ++r) {
    std::vector<offload::LoadTarget> targets;
    for (size_t i = 0; i < keys.size(); ++i) {
      targets.push_back({keys[i], std::span<std::byte>(dest).subspan(i * block_bytes, block_bytes)});
    }
    const auto start = std::chrono::steady_clock::now();
    offload::LoadResult result = m.LoadAsync(std::move(targets)).Get();
    runs.push_back(Seconds(start));
    if (result.num_loaded != keys.size()) runs.back() = 1e9;  // a tier that cannot serve
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// latency + n x bytes / bandwidth through the 1-block and the kBlocks-block times.
TierSpeed FitLoads(double one, double many, int64_t block_bytes) {
  TierSpeed t;
  const double extra = std::max(many - one, 1e-9);
  t.bandwidth = static_cast<double>(kBlocks - 1) * static_cast<double>(block_bytes) / extra;
  t.latency = std::max(0.0, one - static_cast<double>(block_bytes) / t.bandwidth);
  return t;
}

}  // namespace

Result<TierSpeeds> MeasureTierSpeeds(const kv::KvCacheConfig& kv_config, int64_t block_bytes) {
  const kv::ModelFingerprint fingerprint{"calibration", "sim", kv::DescribeKvFormats(kv_config),
                                         kv_config.block_size};
  const offload::RecordIdentity identity = offload::MakeRecordIdentity(kv_config, fingerprint);
  std::vector<std::byte> block(static_cast<size_t>(block_bytes), std::byte{7});
  std::vector<std::byte> dest(block.size() * kBlocks);
  TierSpeeds out;
  {  // CPU tier: stores are copies on the caller's thread; loads go through the read pool.
    offload::OffloadConfig config;
    config.cpu_bytes_to_use = static_cast<uint64_t>(2 * kBlocks * block_bytes);
    std::unique_ptr<offload::OffloadManager> m = offload::OffloadManager::Create(config, identity);
    const std::vector<offload::BlockKey> keys = Keys(kBlocks, 1);
    const auto start = std::chrono::steady_clock::now();
    for (const offload::BlockKey& k : keys) m->StoreToCpu(k, block);
    const double store = Seconds(start);
    const double one = TimeLoad(*m, {keys.front()}, dest);
    const double many = TimeLoad(*m, keys, dest);
    out.cpu = FitLoads(one, many, block_bytes);
    out.cpu.store_bandwidth = static_cast<double>(kBlocks * block_bytes) / std::max(store, 1e-9);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    fmt::format("kvserve-calibrate-{}", ::getpid());
  {  // File tier: blocks written through, then read back (the page cache holds them).
    offload::OffloadConfig config;
    config.spec_name = "TieringOffloadingSpec";
    config.file = offload::FileTierConfig{dir.string(), 4, 4};
    std::unique_ptr<offload::OffloadManager> m = offload::OffloadManager::Create(config, identity);
    const std::vector<offload::BlockKey> keys = Keys(kBlocks, 1000);
    for (const offload::BlockKey& k : keys) m->WriteThrough(k, block);
    m->Flush();
    const double one = TimeLoad(*m, {keys.front()}, dest);
    const double many = TimeLoad(*m, keys, dest);
    out.file = FitLoads(one, many, block_bytes);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (out.file.bandwidth <= 0 || out.cpu.bandwidth <= 0) {
    return Internal("tier timing failed");
  }
  return out;
}

}  // namespace kvserve::sim
