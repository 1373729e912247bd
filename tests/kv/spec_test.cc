#include "kv/spec.h"

#include <gtest/gtest.h>

#include "core/units.h"
#include "kv/arena.h"
#include "kv/config.h"
#include "kv/kv_cache_manager.h"
#include "kv/test_configs.h"

namespace kvserve::kv {
namespace {

using tensor::DType;

KvCacheManagerOptions Options16() {
  KvCacheManagerOptions options;
  options.fingerprint.block_size = 16;
  return options;
}

struct DtypeCase {
  DType dtype;
  int64_t stories_bytes_per_token;  // 2 x 5 layers x row(32 values)
  int64_t m110_bytes_per_token;     // 2 x 12 layers x row(768 values)
};

// Rows: f32 4 B/value; f16, bf16 2 B; q8_0 34 B/32; fp8 33 B/32; fp4 (E4M3/16) 9 B/16.
//   stories row (32 values): 128, 64, 64, 34, 33, 18 B
//   110m row (768 values):   3072, 1536, 1536, 816, 792, 432 B
const DtypeCase kDtypeCases[] = {
    {DType::kF32, 1280, 73728},
    {DType::kF16, 640, 36864},
    {DType::kBF16, 640, 36864},
    {DType::kQ8_0, 340, 19584},
    {DType::kFP8_E4M3_E8M0_32, 330, 19008},
    {DType::kFP4_E2M1_E4M3_16, 180, 10368},
};

TEST(SpecTest, ExactRowSizesFromTheIssue) {
  EXPECT_EQ(tensor::RowBytes(DType::kFP4_E2M1_E4M3_16, 512), 288);
  EXPECT_EQ(tensor::RowBytes(DType::kFP4_E2M1_E8M0_32, 128), 68);
  EXPECT_EQ(tensor::RowBytes(DType::kFP8_E4M3_E8M0_32, 512), 528);
}

TEST(SpecTest, DenseBytesPerTokenEveryDtype) {
  for (const DtypeCase& c : kDtypeCases) {
    SCOPED_TRACE(tensor::DTypeName(c.dtype));
    const KvCacheConfig stories = testing::Stories260K(c.dtype);
    EXPECT_EQ(ComputeBytesPerToken(stories.groups[0].spec, 5).bytes, c.stories_bytes_per_token);
    EXPECT_EQ(PageSizeBytes(stories.groups[0].spec, 16) * 5, 16 * c.stories_bytes_per_token);
    const KvCacheConfig m110 = testing::DenseConfig(12, 12, 64, c.dtype);
    EXPECT_EQ(ComputeBytesPerToken(m110.groups[0].spec, 12).bytes, c.m110_bytes_per_token);
    EXPECT_EQ(PageSizeBytes(m110.groups[0].spec, 16) * 12, 16 * c.m110_bytes_per_token);
  }
}

TEST(SpecTest, FormulaStrings) {
  EXPECT_EQ(ComputeBytesPerToken(FullAttention{4, 8, DType::kF32}, 5).formula,
            "2 (K,V) x 5 layers x 4 kv heads x 8 dims x 4 B = 1280 B");
  EXPECT_EQ(ComputeBytesPerToken(FullAttention{4, 8, DType::kQ8_0}, 5).formula,
            "2 (K,V) x 5 layers x 34 B (q8_0 row of 4 kv heads x 8 dims) = 340 B");
}

// Allocated arena bytes == the spec formula, for every dtype and both dense models.
TEST(SpecTest, ArenaBytesEqualFormula) {
  for (const DtypeCase& c : kDtypeCases) {
    SCOPED_TRACE(tensor::DTypeName(c.dtype));
    for (const auto& [config, bpt] :
         {std::pair{testing::Stories260K(c.dtype), c.stories_bytes_per_token},
          std::pair{testing::DenseConfig(12, 12, 64, c.dtype), c.m110_bytes_per_token}}) {
      const uint64_t budget = 8 * kMiB;
      auto manager = KvCacheManager::Create(config, budget, Options16());
      ASSERT_TRUE(manager.ok()) << manager.status().ToString();
      const KvCapacity& cap = (*manager)->capacity();
      const int64_t blocks = cap.groups[0].num_blocks;
      EXPECT_EQ((*manager)->arena(0).allocated_bytes(), blocks * 16 * bpt);
      EXPECT_EQ(cap.total_arena_bytes, blocks * 16 * bpt);
      EXPECT_LE(cap.total_arena_bytes, static_cast<int64_t>(budget));
      // One more block would not fit.
      EXPECT_GT((blocks + 1) * 16 * bpt, static_cast<int64_t>(budget));
    }
  }
}

TEST(SpecTest, HybridV41Accounting) {
  const KvCacheConfig config = testing::V41Like();
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).ToString();
  const KvLayoutSpec& sliding = config.groups[0].spec;
  const auto& ratio2 = std::get<CompressedLatent>(config.groups[1].spec);
  EXPECT_EQ(TokenRowBytes(sliding), 528);
  EXPECT_EQ(ComputeBytesPerToken(sliding, 40).bytes, 40 * 528);
  EXPECT_EQ(LatentEntryBytes(ratio2), 356);
  EXPECT_EQ(EntriesPerBlock(ratio2, 16), 8);
  EXPECT_EQ(PageSizeBytes(config.groups[1].spec, 16), 8 * 356);
  EXPECT_EQ(PageSizeBytes(config.groups[2].spec, 16), 16 * 356);
  // Global (latent) KV: 3 layers x 1/2 entry + 1 layer x 1 entry, 356 B each = 890 B/token;
  // layer 42 reads layer 41, so the ratio-2 group allocates for 2 layers, not 3.
  const double global = 3 * 356 / 2.0 + 356;
  EXPECT_EQ(global, 890);
  EXPECT_EQ(ComputeBytesPerToken(config.groups[1].spec, 2).bytes, 356);
  EXPECT_EQ(ComputeBytesPerToken(config.groups[2].spec, 1).bytes, 356);
  auto cap = ComputeCapacity(config, 1 * kGiB);
  ASSERT_TRUE(cap.ok()) << cap.status().ToString();
  EXPECT_EQ(cap->bytes_per_token, 40 * 528 + 356 + 356);
  // Sliding peak with the whole prompt in one chunk is every block; with 512-token chunks it is
  // ceil((128 + 512) / 16) + 1 = 41 blocks.
  EXPECT_EQ(cap->groups[0].max_blocks_per_request, 8192 / 16);
  KvCacheConfig chunked = config;
  chunked.max_chunk_tokens = 512;
  auto chunked_cap = ComputeCapacity(chunked, 1 * kGiB);
  ASSERT_TRUE(chunked_cap.ok());
  EXPECT_EQ(chunked_cap->groups[0].max_blocks_per_request, 41);
  EXPECT_GT(chunked_cap->max_concurrency, cap->max_concurrency);
  for (const auto* c : {&*cap, &*chunked_cap}) {
    int64_t total = 0;
    for (const GroupCapacity& g : c->groups) total += g.num_blocks * g.block_bytes;
    EXPECT_EQ(total, c->total_arena_bytes);
    EXPECT_LE(total, static_cast<int64_t>(kGiB));
  }
  auto manager = KvCacheManager::Create(chunked, 64 * kMiB, Options16());
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ((*manager)->arena(g).allocated_bytes(),
              (*manager)->capacity().groups[g].num_blocks *
                  PageSizeBytes(config.groups[g].spec, 16) *
                  static_cast<int64_t>(config.groups[g].layers.size()));
  }
}

// The worked example in config.h.
TEST(SpecTest, ComputeCapacityWorkedExample) {
  auto cap = ComputeCapacity(testing::Stories260K(DType::kF32), 1 * kMiB);
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->groups[0].block_bytes, 20480);
  EXPECT_EQ(cap->groups[0].max_blocks_per_request, 32);
  EXPECT_EQ(cap->groups[0].num_blocks, 51);
  EXPECT_EQ(cap->num_tokens, 800);
  EXPECT_NEAR(cap->max_concurrency, 1028096.0 / 655360.0, 1e-12);
  const std::vector<std::string> lines =
      FormatCapacityReport(testing::Stories260K(DType::kF32), *cap);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("2 (K,V) x 5 layers x 4 kv heads x 8 dims x 4 B = 1280 B"), std::string::npos)
      << all;
  EXPECT_NE(all.find("KV cache: 800 tokens"), std::string::npos) << all;
  EXPECT_NE(all.find("max concurrency at max-model-len 512: 1.57"), std::string::npos) << all;
}

TEST(SpecTest, SlidingMaxBlocksWorkedExample) {
  const KvLayoutSpec spec = SlidingWindow{128, 1, 32, DType::kF16};
  EXPECT_EQ(MaxBlocksPerRequest(spec, 16, 4096, 1), 10);
  EXPECT_EQ(MaxBlocksPerRequest(spec, 16, 64, 1), 4);  // capped by the request itself
  EXPECT_EQ(MaxMemoryBytes(spec, 16, 4096, 1), 10 * 16 * 2 * 64);
}

TEST(SpecTest, ValidationRejectsBadConfigs) {
  KvCacheConfig config = testing::V41Like();
  config.block_size = 6;
  EXPECT_FALSE(ValidateConfig(config).ok());                                // not a power of two
  EXPECT_FALSE(ValidateSpec(CompressedLatent{512, 4, 0}, 2).ok());          // block 2 % ratio 4
  EXPECT_FALSE(ValidateSpec(FullAttention{1, 16, DType::kQ8_0}, 16).ok());  // 16 % 32
  EXPECT_TRUE(ValidateSpec(FullAttention{1, 16, DType::kFP4_E2M1_E4M3_16}, 16).ok());
  config = testing::V41Like();
  config.groups[2].layers.push_back(0);  // layer 0 in two groups
  EXPECT_FALSE(ValidateConfig(config).ok());
  config = testing::V41Like();
  config.groups[1].readers[0].source_layer = 43;  // not a writer of group 1
  EXPECT_FALSE(ValidateConfig(config).ok());
  config = testing::V41Like();
  config.groups[1].readers.clear();  // layer 42 in no group
  EXPECT_FALSE(ValidateConfig(config).ok());
  EXPECT_FALSE(ComputeCapacity(testing::Stories260K(DType::kF32), 20480).ok());
}

TEST(SpecTest, Flags) {
  EXPECT_EQ(*ParseKvCacheDType("auto", DType::kF32), DType::kF32);
  EXPECT_EQ(*ParseKvCacheDType("auto", DType::kBF16), DType::kF16);
  EXPECT_EQ(*ParseKvCacheDType("q8_0", DType::kF32), DType::kQ8_0);
  EXPECT_EQ(*ParseKvCacheDType("fp8", DType::kF32), DType::kFP8_E4M3_E8M0_32);
  EXPECT_EQ(*ParseKvCacheDType("fp4", DType::kF32), DType::kFP4_E2M1_E4M3_16);
  EXPECT_FALSE(ParseKvCacheDType("q4_0", DType::kF32).ok());
  EXPECT_FALSE(ParseKvCacheDType("fp16", DType::kF32).ok());
  EXPECT_TRUE(ValidateBlockSize(1).ok());
  EXPECT_TRUE(ValidateBlockSize(1024).ok());
  EXPECT_FALSE(ValidateBlockSize(0).ok());
  EXPECT_FALSE(ValidateBlockSize(24).ok());
  EXPECT_FALSE(ValidateBlockSize(2048).ok());
  EXPECT_EQ(*ParseKvBudget("4GiB"), 4 * kGiB);
  EXPECT_FALSE(ParseKvBudget("0").ok());
  EXPECT_FALSE(ParseKvBudget("lots").ok());
  EXPECT_EQ(DefaultCpuKvBudgetBytes(8 * kGiB), 2 * kGiB);
  EXPECT_EQ(DefaultCpuKvBudgetBytes(64 * kGiB), 4 * kGiB);
  EXPECT_GT(DefaultCpuKvBudgetBytes(), 0u);
}

// kv_view.h's examples: one head when a head holds whole quantization blocks, else the fewest
// whole heads that do (up to the whole row).
TEST(SpecTest, KvSegmentElems) {
  EXPECT_EQ(tensor::KvSegmentElems(DType::kF16, 12, 64), 64);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kQ8_0, 12, 64), 64);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kFP4_E2M1_E4M3_16, 12, 64), 64);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kF16, 4, 8), 8);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kQ8_0, 4, 8), 32);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kFP4_E2M1_E4M3_16, 4, 8), 16);
  EXPECT_EQ(tensor::KvSegmentElems(DType::kQ8_0, 6, 48), 96);  // 2 heads = 3 blocks
  EXPECT_EQ(tensor::KvSegmentElems(DType::kQ8_0, 3, 32), 32);
}

// The arena.h example (with 4 writer layers, so 16384 B blocks): V of head 1, slot 3, layer 2,
// block 7 at 7*16384 + 2*4096 + 16*128 + (1*16 + 3)*32: head-major segments of one head.
TEST(SpecTest, KvViewLayout) {
  KvCacheConfig config = testing::Stories260K(DType::kF32);
  config.groups[0].layers = {0, 1, 2, 3};
  config.groups[0].readers = {{4, 2}};
  KvArena arena(GroupBlockBytes(config, 0), 8, /*allocate_memory=*/true);
  const tensor::PagedKvView view = MakeKvView(config, 0, arena);
  ASSERT_EQ(view.layers.size(), 5u);
  EXPECT_EQ(view.row_elems, 32);
  EXPECT_EQ(view.segment_elems, 8);
  EXPECT_EQ(view.segment_bytes, 32u);
  EXPECT_EQ(view.VSegment(2, 7, 3, 1) - arena.data(),
            7 * 16384 + 2 * 4096 + 16 * 128 + (1 * 16 + 3) * 32);
  EXPECT_EQ(view.KSegment(4, 7, 3, 2), view.KSegment(2, 7, 3, 2));  // reader shares its source
  const KvCacheConfig v41 = testing::V41Like();
  KvArena latent_arena(GroupBlockBytes(v41, 1), 4, true);
  const tensor::PagedLatentView lv = MakeLatentView(v41, 1, latent_arena);
  // Block page: layer 40 [8 latents x 288 B][8 keys x 68 B], then layer 41.
  EXPECT_EQ(lv.LatentRow(41, 2, 5) - latent_arena.data(), 2 * 5696 + 2848 + 5 * 288);
  EXPECT_EQ(lv.IndexRow(40, 1, 7) - latent_arena.data(), 5696 + 8 * 288 + 7 * 68);
  EXPECT_EQ(lv.LatentRow(42, 0, 0), lv.LatentRow(41, 0, 0));
  KvArena sliding_arena(GroupBlockBytes(v41, 0), 2, true);
  const tensor::PagedKvView sv = MakeKvView(v41, 0, sliding_arena);
  EXPECT_EQ(sv.num_segments(), 1);  // one 512-dim head
  EXPECT_EQ(sv.KSegment(3, 1, 2, 0), sv.VSegment(3, 1, 2, 0));  // shared_kv
}

}  // namespace
}  // namespace kvserve::kv
