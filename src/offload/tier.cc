#include "offload/tier.h"

#include <cstring>

namespace kvserve::offload {

std::string BlockKey::ToString() const { return hash.ToHex() + "-g" + std::to_string(group); }

const char* TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kCpu: return "cpu";
    case TierKind::kFile: return "file";
    case TierKind::kRedis: return "redis";
  }
  return "unknown";
}

Result<bool> Tier::GetInto(const BlockKey& key, std::span<std::byte> payload) {
  KV_ASSIGN_OR_RETURN(std::optional<Bytes> bytes, Get(key));
  if (!bytes || bytes->size() != payload.size()) return false;
  std::memcpy(payload.data(), bytes->data(), payload.size());
  return true;
}

}  // namespace kvserve::offload
