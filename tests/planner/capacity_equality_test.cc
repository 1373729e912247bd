// One source of truth: for each local model and several budgets, the planner's KV token
// capacity equals what the KV cache manager (what `kvserve serve` builds at startup)
// allocates for the same budget. The allocator side builds its kv::KvCacheConfig by hand from
// the model's shape, independently of the planner's preset/GGUF parsing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/units.h"
#include "kv/kv_cache_manager.h"
#include "model/dense_random.h"
#include "planner/gguf_model.h"
#include "planner/plan.h"

namespace kvserve::planner {
namespace {

using tensor::DType;

const uint64_t kBudgets[] = {4 * kMiB, 8 * kMiB + 7, 64 * kMiB, 1 * kGiB};

DeviceDesc Cpu() {
  return DeviceDesc{"cpu", "test CPU", 64 * kGiB, true};
}

// Tokens the allocator can hold: usable blocks (all but the null block) x block size, per
// non-sliding group, the smallest; plus the arena bytes it really reserved.
struct Allocated {
  int64_t tokens = 0;
  int64_t arena_bytes = 0;
  std::vector<int64_t> blocks;
};

Allocated Allocate(const kv::KvCacheConfig& config, uint64_t budget) {
  kv::KvCacheManagerOptions options;
  options.allocate_memory = budget <= 64 * kMiB;  // real memory where it is cheap
  Result<std::unique_ptr<kv::KvCacheManager>> manager =
      kv::KvCacheManager::Create(config, budget, options);
  Allocated out;
  EXPECT_TRUE(manager.ok()) << manager.status().ToString();
  if (!manager.ok()) return out;
  out.tokens = INT64_MAX;
  for (int g = 0; g < (*manager)->num_groups(); ++g) {
    const int64_t blocks = (*manager)->pool(g).num_blocks();
    out.blocks.push_back(blocks);
    out.arena_bytes += (*manager)->arena(g).block_bytes() * (*manager)->arena(g).num_blocks();
    if (options.allocate_memory) {
      EXPECT_EQ((*manager)->arena(g).allocated_bytes(),
                (*manager)->arena(g).block_bytes() * blocks);
    }
    if (!std::holds_alternative<kv::SlidingWindow>(config.groups[g].spec)) {
      out.tokens = std::min(out.tokens,
                            ((*manager)->pool(g).NumUsableBlocks()) * int64_t{config.block_size});
    }
  }
  return out;
}

void ExpectSame(const ModelDesc& model, const kv::KvCacheConfig& server_config) {
  for (uint64_t budget : kBudgets) {
    PlanOptions options;
    options.kv_cache_memory_bytes = budget;
    options.max_model_len = server_config.max_model_len;
    options.max_num_batched_tokens = server_config.max_chunk_tokens;
    Result<Plan> plan = MakePlan(model, Cpu(), options);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const Allocated allocated = Allocate(server_config, budget);
    EXPECT_EQ(plan->capacity.num_tokens, allocated.tokens) << model.name << " budget " << budget;
    EXPECT_EQ(plan->capacity.total_arena_bytes, allocated.arena_bytes) << budget;
    EXPECT_LE(allocated.arena_bytes, static_cast<int64_t>(budget));
    ASSERT_EQ(plan->groups.size(), allocated.blocks.size());
    for (size_t g = 0; g < allocated.blocks.size(); ++g) {
      EXPECT_EQ(plan->groups[g].capacity.num_blocks, allocated.blocks[g]) << g;
    }
  }
}

kv::KvCacheConfig DenseConfig(int layers, int kv_heads, int head_dim, DType dtype,
                              int64_t max_model_len) {
  kv::KvCacheConfig config;
  config.num_layers = layers;
  config.block_size = 16;
  config.max_model_len = max_model_len;
  config.max_chunk_tokens = 8192;
  kv::KvCacheGroup group;
  group.spec = kv::FullAttention{kv_heads, head_dim, dtype, false};
  for (int i = 0; i < layers; ++i) group.layers.push_back(i);
  config.groups.push_back(group);
  return config;
}

TEST(CapacityEquality, Stories260K) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared absent)";
  Result<ModelDesc> model = LoadGgufModel(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->num_layers, 5);
  // stories260K: 5 layers, 4 KV heads of 8 dims, f32 weights -> f32 KV, context 512.
  ExpectSame(*model, DenseConfig(5, 4, 8, DType::kF32, 512));
}

// The `make-model --preset 110m` shape (llama2.c stories110M): 12 layers, 12 heads of 64,
// context 1024; f16 weights -> f16 KV.
TEST(CapacityEquality, Preset110m) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    ModelDesc model;
    model.name = "110m";
    model.num_layers = 12;
    model.max_model_len = 1024;
    KvGroupDesc group{"full", kv::FullAttention{12, 64, dtype, false}, {}, {}, false, ""};
    for (int i = 0; i < 12; ++i) group.layers.push_back(i);
    model.kv_groups.push_back(group);
    ExpectSame(model, DenseConfig(12, 12, 64, dtype, 1024));
  }
}

// A DeepSeek-V4.1-shaped mini model: 8 layers, a 16-token FP8 window in every layer, a ratio-2
// latent written by layer 2 (read by 3) and a ratio-1 latent written by 4 (read by 5-7).
TEST(CapacityEquality, V41Mini) {
  const kv::SlidingWindow window{16, 1, 64, DType::kFP8_E4M3_E8M0_32, true};
  kv::CompressedLatent latent2;
  latent2.latent_dim = 64;
  latent2.compress_ratio = 2;
  latent2.index_key_dim = 32;
  kv::CompressedLatent latent1 = latent2;
  latent1.compress_ratio = 1;
  ModelDesc model;
  model.name = "v4.1-mini";
  model.num_layers = 8;
  model.max_model_len = 2048;
  model.kv_groups = {{"window", window, {0, 1, 2, 3, 4, 5, 6, 7}, {}, true, ""},
                     {"latent/2", latent2, {2}, {3}, true, ""},
                     {"latent/1", latent1, {4}, {5, 6, 7}, true, ""}};
  // The server's config: the window owns layer ids 0-7; the latents' writers and readers get
  // KV slot ids 8.. (kv counts each id in one group).
  kv::KvCacheConfig config;
  config.num_layers = 14;
  config.max_model_len = 2048;
  config.max_chunk_tokens = 256;
  config.groups = {{window, {0, 1, 2, 3, 4, 5, 6, 7}, {}},
                   {latent2, {8}, {{9, 8}}},
                   {latent1, {10}, {{11, 10}, {12, 10}, {13, 10}}}};
  ExpectSame(model, config);
}

// gpt-oss tiny as make-model writes it (F32 matrices: F32 KV): 4 layers of 2 KV heads x 32
// dims, the even ones sliding over 16 tokens. The allocator's config by hand: a full group of
// layers 1 and 3 (2 x 2 layers x 2 heads x 32 dims x 4 B = 1024 B per token) and a sliding group
// of layers 0 and 2 whose blocks per sequence are fixed by the window and the prefill chunk.
TEST(CapacityEquality, GptOssTiny) {
  Result<model::DenseSpec> spec = model::FindDensePreset("gpt-oss", "tiny");
  ASSERT_TRUE(spec.ok());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvserve_capacity_gpt_oss_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  ASSERT_TRUE(model::DenseRandomWriter(*spec, model::RandomWeights{})->Write(path).ok());
  Result<ModelDesc> model = LoadGgufModel(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->max_model_len, 4096);
  kv::KvCacheConfig config;
  config.num_layers = 4;
  config.max_model_len = 4096;
  config.max_chunk_tokens = 2048;
  config.groups = {{kv::FullAttention{2, 32, DType::kF32, false}, {1, 3}, {}},
                   {kv::SlidingWindow{16, 2, 32, DType::kF32, false}, {0, 2}, {}}};
  ExpectSame(*model, config);
  // The formula: 1024 B per token in the full group, the sliding group's fixed
  // ceil((16 + 2048) / 16) + 1 = 130 blocks of 16 x 1024 B per sequence.
  Result<kv::KvCapacity> c = kv::ComputeCapacity(config, 64 * kMiB);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->groups[0].bytes_per_token.bytes, 1024.0);
  EXPECT_EQ(c->groups[0].max_blocks_per_request, 256);
  EXPECT_EQ(c->groups[1].block_bytes, 16 * 1024);
  EXPECT_EQ(c->groups[1].max_blocks_per_request, 130);
  const uint64_t usable = 64 * kMiB - 2 * 16 * 1024;
  EXPECT_EQ(c->groups[0].num_blocks, static_cast<int64_t>(usable * 256 / (386 * 16384)) + 1);
  EXPECT_EQ(c->groups[1].num_blocks, static_cast<int64_t>(usable * 130 / (386 * 16384)) + 1);
}

}  // namespace
}  // namespace kvserve::planner
