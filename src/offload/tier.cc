#include "offload/tier.h"

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

}  // namespace kvserve::offload
