#include "offload/cpu_tier.h"

#include <chrono>
#include <vector>

#include "core/stream_copy.h"

namespace kvserve::offload {

Status CpuTier::Put(const BlockKey& key, std::span<const std::byte> bytes) {
  PutShared(key, std::make_shared<const Bytes>(bytes.begin(), bytes.end()));
  return Status::Ok();
}

void CpuTier::PutShared(const BlockKey& key, SharedBytes bytes) {
  CHECK(bytes != nullptr);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Entry> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {  // same key, same bytes: refresh only
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    if (bytes->size() > capacity_bytes_) {
      evicted.push_back({key, std::move(bytes)});
    } else {
      while (usage_bytes_ + bytes->size() > capacity_bytes_) {
        Entry& victim = lru_.back();
        usage_bytes_ -= victim.bytes->size();
        map_.erase(victim.key);
        evicted.push_back(std::move(victim));
        lru_.pop_back();
      }
      usage_bytes_ += bytes->size();
      counters_.stores.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_stored.fetch_add(static_cast<int64_t>(bytes->size()),
                                       std::memory_order_relaxed);
      lru_.push_front({key, std::move(bytes)});
      map_[key] = lru_.begin();
    }
    counters_.usage_bytes.store(static_cast<int64_t>(usage_bytes_), std::memory_order_relaxed);
    counters_.num_blocks.store(static_cast<int64_t>(map_.size()), std::memory_order_relaxed);
    counters_.evictions.fetch_add(static_cast<int64_t>(evicted.size()),
                                  std::memory_order_relaxed);
  }
  counters_.store_latency.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (sink_) {
    for (Entry& e : evicted) sink_(e.key, std::move(e.bytes));
  }
}

SharedBytes CpuTier::GetShared(const BlockKey& key) {
  const auto start = std::chrono::steady_clock::now();
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  SharedBytes bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    bytes = it->second->bytes;
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.loads.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_loaded.fetch_add(static_cast<int64_t>(bytes->size()), std::memory_order_relaxed);
  counters_.load_latency.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return bytes;
}

Result<std::optional<Bytes>> CpuTier::Get(const BlockKey& key) {
  SharedBytes bytes = GetShared(key);
  if (!bytes) return std::optional<Bytes>();
  return std::optional<Bytes>(*bytes);
}

Result<bool> CpuTier::GetInto(const BlockKey& key, std::span<std::byte> payload) {
  SharedBytes bytes = GetShared(key);
  if (!bytes || bytes->size() != payload.size()) return false;
  // Streaming stores: the destination (a device block) is read next by the forward pass on
  // other threads, not by this one.
  StreamCopy(payload.data(), bytes->data(), payload.size());
  return true;
}

bool CpuTier::Contains(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

uint64_t CpuTier::usage_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_bytes_;
}

size_t CpuTier::num_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace kvserve::offload
