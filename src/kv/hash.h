// Prefix hashing: a block's key is a 128-bit xxh3 hash chained over every token before it.
//
//   root      = XXH3_128(fingerprint.ToString(), seed kRootSeed)
//   hash[0]   = XXH3_128(root || tokens[0, B) || extra_0)
//   hash[i]   = XXH3_128(hash[i-1] || tokens[i*B, (i+1)*B))
// with B = block size and || the explicit little-endian serialisation below:
//   a hash:  16 bytes, low 64 bits then high 64 bits, each little-endian
//   a token: 4 bytes, int32 little-endian
//   extra_0: 1 byte tag 0x01, 4-byte little-endian length, the cache_salt bytes (only when a
//            salt is given; later multimodal / LoRA ids get their own tags)
// Nothing depends on pointers, time, process or platform: the same tokens under the same
// fingerprint give the same keys in every process, forever (tested with known answers).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::kv {

using TokenId = int32_t;

struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  std::string ToHex() const;  // 32 hex digits, high then low
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.low ^ h.high); }
};

// Everything that must change the key when the bytes in a block would change.
struct ModelFingerprint {
  std::string weights_digest;  // hex digest of the weights, supplied by the caller
  std::string arch;            // "llama", ...
  std::string kv_formats;      // DescribeKvFormats(config)
  int block_size = 16;
  // "kvserve-kv-v2|arch=llama|weights=abcd|kv=...|block=16". The version names the byte
  // layout of a block: v2 = head-major K/V segments (tensor/kv_view.h); v1 was token-major.
  std::string ToString() const;
};

// The seed every chain starts from.
BlockHash RootHash(const ModelFingerprint& fingerprint);

// One link: hash(parent || tokens || extra). `salt` is only used for the first block (pass
// an empty view otherwise). note: tokens.size() == block size.
BlockHash HashBlock(const BlockHash& parent, std::span<const TokenId> tokens,
                    std::string_view salt);

// Hashes of the full blocks of `tokens` beyond those already in *hashes (extends it).
// Example: block 4, 10 tokens, *hashes empty -> 2 hashes (tokens [0,4) and [4,8)).
void ExtendBlockHashes(const BlockHash& root, std::span<const TokenId> tokens, int block_size,
                       std::string_view salt, std::vector<BlockHash>* hashes);

}  // namespace kvserve::kv
