#include "kv/hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <memory>
#include <numeric>

namespace kvserve::kv {
namespace {

ModelFingerprint TestFingerprint() {
  return ModelFingerprint{.weights_digest = "00112233445566778899aabbccddeeff",
                          .arch = "llama",
                          .kv_formats =
                              "full_attention(kv_heads=4,head_dim=8,dtype=f16,"
                              "shared_kv=0):layers=0,1,2,3,4",
                          .block_size = 4};
}

std::vector<TokenId> Iota(int n, TokenId start = 0) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Known answers, computed once with this implementation (xxh3-128, the serialisation in
// hash.h). A change here breaks every stored cache (file tier, Redis): bump the fingerprint
// version ("kvserve-kv-v2") on purpose instead.
TEST(HashTest, KnownAnswers) {
  const ModelFingerprint fp = TestFingerprint();
  EXPECT_EQ(fp.ToString(),
            "kvserve-kv-v2|arch=llama|weights=00112233445566778899aabbccddeeff|kv=full_attention("
            "kv_heads=4,head_dim=8,dtype=f16,shared_kv=0):layers=0,1,2,3,4|block=4");
  const BlockHash root = RootHash(fp);
  std::vector<BlockHash> hashes;
  const std::vector<TokenId> tokens = Iota(10, 1);
  ExtendBlockHashes(root, tokens, 4, "", &hashes);
  ASSERT_EQ(hashes.size(), 2u);
  std::vector<BlockHash> salted;
  ExtendBlockHashes(root, tokens, 4, "tenant-a", &salted);
  ASSERT_EQ(salted.size(), 2u);
  const BlockHash zero = HashBlock(BlockHash{}, std::vector<TokenId>{0, -1, 2147483647, 7}, "");
  EXPECT_EQ(root.ToHex(), "c7a2dcdc4f122006f9fe5bde208af404");
  EXPECT_EQ(hashes[0].ToHex(), "9378350cfb66c86ea3fd5af62f100846");
  EXPECT_EQ(hashes[1].ToHex(), "9e4cfc540346d90c4193bb5d9ce0559b");
  EXPECT_EQ(salted[0].ToHex(), "56697e4ecb97555770e8c489be764448");
  EXPECT_EQ(salted[1].ToHex(), "6b5bfdd7b99ab9260b25859199252c4c");
  EXPECT_EQ(zero.ToHex(), "ea23f66b22b21d33cef176698fdd3399");
}

TEST(HashTest, ChainSaltAndFingerprintChangeKeys) {
  const BlockHash root = RootHash(TestFingerprint());
  const std::vector<TokenId> tokens = Iota(12);
  std::vector<BlockHash> plain, salted;
  ExtendBlockHashes(root, tokens, 4, "", &plain);
  ExtendBlockHashes(root, tokens, 4, "s", &salted);
  ASSERT_EQ(plain.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(plain[i], salted[i]) << i;  // the chain carries it
  // Same block content at another position (another parent) gets another key.
  EXPECT_NE(HashBlock(plain[0], std::vector<TokenId>{0, 1, 2, 3}, ""), plain[0]);
  ModelFingerprint other = TestFingerprint();
  other.kv_formats += "x";
  EXPECT_NE(RootHash(other), root);
  other = TestFingerprint();
  other.block_size = 8;
  EXPECT_NE(RootHash(other), root);
}

TEST(HashTest, IncrementalEqualsWhole) {
  const BlockHash root = RootHash(TestFingerprint());
  const std::vector<TokenId> tokens = Iota(37, 100);
  std::vector<BlockHash> whole, step;
  ExtendBlockHashes(root, tokens, 4, "salt", &whole);
  for (size_t n = 0; n <= tokens.size(); n += 3) {
    ExtendBlockHashes(root, std::span(tokens).first(n), 4, "salt", &step);
  }
  ExtendBlockHashes(root, tokens, 4, "salt", &step);
  EXPECT_EQ(whole, step);
  EXPECT_EQ(whole.size(), 9u);
}

// Same content at different addresses (heap copies, a large block that spans the internal
// buffer) hashes the same: nothing depends on pointers.
TEST(HashTest, IndependentOfAddresses) {
  const std::vector<TokenId> a = Iota(256, 5);
  auto b = std::make_unique<TokenId[]>(257);
  std::copy(a.begin(), a.end(), b.get() + 1);
  const BlockHash parent{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  const std::string salt(300, 'q');
  EXPECT_EQ(HashBlock(parent, a, salt), HashBlock(parent, std::span(b.get() + 1, 256), salt));
  EXPECT_NE(HashBlock(parent, a, salt), HashBlock(parent, a, ""));
}

// The serialisation documented in hash.h, built by hand and hashed in one call.
TEST(HashTest, MatchesDocumentedSerialisation) {
  const BlockHash parent{0x0807060504030201ULL, 0x100f0e0d0c0b0a09ULL};
  const std::vector<TokenId> tokens = {1, -2, 0x01020304};
  std::vector<uint8_t> bytes = {1,  2,  3,  4,  5,    6, 7, 8, 9,    10,   11,   12,
                                13, 14, 15, 16, 1,    0, 0, 0, 0xfe, 0xff, 0xff, 0xff,
                                4,  3,  2,  1,  0x01, 2, 0, 0, 0,    'a',  'b'};
  const XXH128_hash_t want = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(HashBlock(parent, tokens, "ab"), (BlockHash{want.low64, want.high64}));
  bytes.resize(28);  // no salt: no tag, no length
  const XXH128_hash_t plain = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(HashBlock(parent, tokens, ""), (BlockHash{plain.low64, plain.high64}));
}

}  // namespace
}  // namespace kvserve::kv
