#include "kv/hash.h"

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <array>

#include "core/check.h"

namespace kvserve::kv {
namespace {

constexpr uint64_t kRootSeed = 0x6b76736572766531ULL;  // "kvserve1"
constexpr uint8_t kSaltTag = 0x01;

BlockHash FromXxh(const XXH128_hash_t& h) {
  return BlockHash{h.low64, h.high64};
}

}  // namespace

std::string BlockHash::ToHex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

std::string ModelFingerprint::ToString() const {
  return fmt::format("kvserve-kv-v2|arch={}|weights={}|kv={}|block={}", arch, weights_digest,
                     kv_formats, block_size);
}

BlockHash RootHash(const ModelFingerprint& fingerprint) {
  const std::string text = fingerprint.ToString();
  return FromXxh(XXH3_128bits_withSeed(text.data(), text.size(), kRootSeed));
}

BlockHash HashBlock(const BlockHash& parent, std::span<const TokenId> tokens,
                    std::string_view salt) {
  // Streams the serialisation through a small stack buffer: same bytes, same hash as one
  // XXH3_128bits call over the whole buffer, without a heap allocation per block.
  XXH3_state_t state;
  CHECK(XXH3_128bits_reset(&state) == XXH_OK);
  std::array<uint8_t, 256> buf;
  size_t used = 0;
  auto flush = [&] {
    CHECK(XXH3_128bits_update(&state, buf.data(), used) == XXH_OK);
    used = 0;
  };
  auto put = [&](uint64_t v, int num_bytes) {
    if (used + num_bytes > buf.size()) flush();
    for (int i = 0; i < num_bytes; ++i) buf[used++] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(parent.low, 8);
  put(parent.high, 8);
  for (TokenId t : tokens) put(static_cast<uint32_t>(t), 4);
  if (!salt.empty()) {
    put(kSaltTag, 1);
    put(static_cast<uint32_t>(salt.size()), 4);
    for (char c : salt) put(static_cast<uint8_t>(c), 1);
  }
  flush();
  return FromXxh(XXH3_128bits_digest(&state));
}

void ExtendBlockHashes(const BlockHash& root, std::span<const TokenId> tokens, int block_size,
                       std::string_view salt, std::vector<BlockHash>* hashes) {
  CHECK_GT(block_size, 0);
  const size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = hashes->size(); i < num_full; ++i) {
    const BlockHash& parent = i == 0 ? root : (*hashes)[i - 1];
    hashes->push_back(HashBlock(parent, tokens.subspan(i * block_size, block_size),
                                i == 0 ? salt : std::string_view()));
  }
}

}  // namespace kvserve::kv
