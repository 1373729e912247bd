// The `kvserve-v41` config, its KV groups and its byte truth: the V4.1-Flash shape stores
// 890 B of global KV per token (720 latent + 170 indexer) and 128 x 40 x 528 B of window per
// sequence; the mini model's arenas hold exactly the formula's bytes.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/v41_config.h"
#include "model/v41_random_model.h"

namespace kvserve::model {
namespace {

V41Config ReadBack(const V41ModelSpec& spec) {
  auto file = gguf::GgufFile::FromBuffer(V41ModelWriter(spec)->Serialize());
  CHECK(file.ok()) << file.status().ToString();
  Result<V41Config> config = ReadV41Config(**file);
  CHECK(config.ok()) << config.status().ToString();
  return *config;
}

TEST(V41Layout, FlashShapeIsEightHundredNinetyBytesPerToken) {
  const V41Config c = ReadBack(*FindV41Preset("v41-flash-shape"));
  EXPECT_FALSE(c.has_weights);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.vocab_size, 129280);
  const V41KvBytes b = ComputeV41KvBytes(c);
  EXPECT_EQ(b.latent_bytes_per_token, 720.0);
  EXPECT_EQ(b.index_bytes_per_token, 170.0);
  EXPECT_EQ(b.global_bytes_per_token, 890.0);
  EXPECT_EQ(b.window_row_bytes, 528);
  EXPECT_EQ(b.window_bytes_per_sequence, 128 * 40 * 528);
  ASSERT_EQ(b.lines.size(), 2u);
  EXPECT_NE(b.lines[0].find("= 890 B"), std::string::npos) << b.lines[0];
  EXPECT_NE(b.lines[1].find("2.58 MiB"), std::string::npos) << b.lines[1];
}

TEST(V41Layout, FlashShapeGroupsAgreeWithTheKvManagersOwnMaths) {
  const V41Config c = ReadBack(*FindV41Preset("v41-flash-shape"));
  const V41KvLayout layout = MakeV41KvLayout(c, 16, 1 << 20, 8192);
  ASSERT_TRUE(kv::ValidateConfig(layout.kv_config).ok());
  const auto& groups = layout.kv_config.groups;
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].layers.size(), 40u);
  EXPECT_EQ(groups[1].layers, (std::vector<int>{40, 41, 42}));  // layers 2, 8, 14
  EXPECT_EQ(groups[1].readers.size(), 15u);
  EXPECT_EQ(groups[2].layers, (std::vector<int>{58}));  // layer 20
  EXPECT_EQ(groups[2].readers.size(), 19u);
  EXPECT_EQ(layout.kv_config.num_layers, 78);
  EXPECT_FALSE(layout.layers[1].latent_group.has_value());
  EXPECT_EQ(layout.layers[11].latent_slot, 41);  // reads layer 8's entries
  EXPECT_EQ(layout.layers[39].latent_slot, 58);
  double global = 0;
  for (size_t g = 1; g < groups.size(); ++g) {
    global +=
        kv::ComputeBytesPerToken(groups[g].spec, static_cast<int>(groups[g].layers.size())).bytes;
  }
  EXPECT_EQ(global, 890.0);
  EXPECT_EQ(kv::ComputeBytesPerToken(groups[0].spec, 40).bytes, 40 * 528);
  // Window: a 128-token window in blocks of 16 with decode chunks holds at most 10 blocks.
  EXPECT_EQ(kv::MaxBlocksPerRequest(groups[0].spec, 16, 1 << 20, 1), 10);
}

TEST(V41Layout, MiniArenaBytesEqualTheFormula) {
  V41ModelSpec spec = *FindV41Preset("mini");
  spec.with_weights = false;  // the layout needs the metadata only
  const V41Config c = ReadBack(spec);
  const V41KvLayout layout = MakeV41KvLayout(c, 16, 2048, 256);
  kv::KvCacheManagerOptions options;
  auto manager = kv::KvCacheManager::Create(layout.kv_config, 4 << 20, options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  // Per block: window 16 tokens x 8 layers x 66 B (fp8 of 64 = 2 x 33 B); latent ratio 2:
  // 8 entries x (36 B latent (4 x 9) + 17 B key (1 x 17)) x 1 writer; ratio 1: 16 entries x 53 B.
  const std::vector<int64_t> want_block_bytes = {16 * 8 * 66, 8 * 53, 16 * 53};
  int64_t total = 0;
  for (int g = 0; g < 3; ++g) {
    const kv::KvArena& arena = (*manager)->arena(g);
    EXPECT_EQ(arena.block_bytes(), want_block_bytes[g]) << "group " << g;
    EXPECT_EQ(arena.allocated_bytes(), arena.num_blocks() * want_block_bytes[g]) << "group " << g;
    total += arena.allocated_bytes();
  }
  EXPECT_EQ(total, (*manager)->capacity().total_arena_bytes);
  EXPECT_LE(total, 4 << 20);
  EXPECT_EQ(ComputeV41KvBytes(c).global_bytes_per_token, 53.0 / 2 + 53.0);
}

TEST(V41Layout, BadMetadataIsAStatus) {
  V41ModelSpec spec = *FindV41Preset("v41-flash-shape");
  spec.config.sources = {{2, 200}};  // ratio above the window
  auto file = gguf::GgufFile::FromBuffer(V41ModelWriter(spec)->Serialize());
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(ReadV41Config(**file).ok());
  spec = *FindV41Preset("v41-flash-shape");
  spec.config.sources = {{8, 2}, {2, 2}};  // not increasing
  file = gguf::GgufFile::FromBuffer(V41ModelWriter(spec)->Serialize());
  EXPECT_FALSE(ReadV41Config(**file).ok());
  spec = *FindV41Preset("v41-flash-shape");
  spec.config.latent_dim = 500;  // not a multiple of 32
  file = gguf::GgufFile::FromBuffer(V41ModelWriter(spec)->Serialize());
  EXPECT_FALSE(ReadV41Config(**file).ok());
  EXPECT_FALSE(FindV41Preset("huge").ok());
}

}  // namespace
}  // namespace kvserve::model
