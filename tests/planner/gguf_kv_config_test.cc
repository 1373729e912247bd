// A GGUF model's KV config has one source: model::MakeModelKvLayout (model/kv_layout.h), the
// function the server's startup reaches. The planner's PlanKvConfig for a GGUF model must be
// that config (at tp 1, field for field), with only the TP head split on top.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/units.h"
#include "kv/config.h"
#include "model/config.h"
#include "model/deepseek2_random.h"
#include "model/dense_random.h"
#include "model/kv_layout.h"
#include "model/v41_random_model.h"
#include "planner/gguf_model.h"
#include "planner/plan.h"
#include "planner/presets.h"

namespace kvserve::planner {
namespace {

namespace fs = std::filesystem;
using tensor::DType;

void ExpectSameConfig(const kv::KvCacheConfig& a, const kv::KvCacheConfig& b) {
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.max_model_len, b.max_model_len);
  EXPECT_EQ(a.max_chunk_tokens, b.max_chunk_tokens);
  EXPECT_EQ(kv::DescribeKvFormats(a), kv::DescribeKvFormats(b));  // specs, writers, readers
}

// Its groups' descriptions, sorted: the same groups, whichever order each side lists them in
// (the planner's gpt-oss-20b preset lists its sliding group first, DenseKvGroups the full one).
std::vector<std::string> SortedGroups(const kv::KvCacheConfig& c) {
  std::vector<std::string> groups;
  std::string all = kv::DescribeKvFormats(c);
  for (size_t start = 0; start <= all.size();) {
    const size_t end = std::min(all.find(';', start), all.size());
    groups.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

// The mini kvserve-v41 model, metadata only (the KV layout needs no weights).
class V41Gguf : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("kvserve_gguf_kv_" + std::to_string(getpid()) + ".gguf"))
                .string();
    Result<model::V41ModelSpec> spec = model::FindV41Preset("mini");
    ASSERT_TRUE(spec.ok());
    spec->with_weights = false;
    ASSERT_TRUE(model::V41ModelWriter(*spec)->Write(path_).ok());
  }
  void TearDown() override { fs::remove(path_); }
  std::string path_;
};

TEST_F(V41Gguf, PlannerUsesTheServersConfig) {
  Result<ModelDesc> model = LoadGgufModel(path_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE(model->kv_shape.has_value());
  EXPECT_EQ(model->num_layers, 8);
  EXPECT_EQ(model->max_model_len, 2048);
  // mini: window 16 in every layer; source 2 (ratio 2) read by 3-4, source 5 (ratio 1) by 6-7.
  ASSERT_EQ(model->kv_groups.size(), 3u);
  EXPECT_EQ(model->kv_groups[0].name, "window");
  EXPECT_EQ(FormatLayerList(model->kv_groups[0].layers), "0-7");
  EXPECT_EQ(model->kv_groups[1].name, "latent/2");
  EXPECT_EQ(model->kv_groups[1].layers, std::vector<int>{2});
  EXPECT_EQ(FormatLayerList(model->kv_groups[1].readers), "3-4");
  EXPECT_EQ(model->kv_groups[2].name, "latent/1");
  EXPECT_EQ(model->kv_groups[2].layers, std::vector<int>{5});
  EXPECT_EQ(FormatLayerList(model->kv_groups[2].readers), "6-7");

  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  Result<model::V41Config> v41 = model::ReadV41Config(**file);
  ASSERT_TRUE(v41.ok()) << v41.status().ToString();
  for (int64_t chunk : {1, 256, 2048}) {
    for (const char* dtype : {"auto", "fp4"}) {  // trained formats ignore the flag
      Result<kv::KvCacheConfig> planned = PlanKvConfig(*model, 1, 16, 1024, chunk, dtype);
      ASSERT_TRUE(planned.ok()) << planned.status().ToString();
      // What engine::ResolveKvLayout builds at startup.
      ExpectSameConfig(*planned, model::MakeV41KvLayout(*v41, 16, 1024, chunk).kv_config);
    }
  }
  // Under TP the single-head window and latents are replicated: the same config per rank.
  Result<kv::KvCacheConfig> tp4 = PlanKvConfig(*model, 4, 16, 1024, 256, "auto");
  ASSERT_TRUE(tp4.ok()) << tp4.status().ToString();
  ExpectSameConfig(*tp4, model::MakeV41KvLayout(*v41, 16, 1024, 256).kv_config);
  // A block size the ratio-2 latent cannot tile is an error, not a crash.
  EXPECT_FALSE(PlanKvConfig(*model, 1, 1, 1024, 256, "auto").ok());
}

// The DeepSeek-V4.1-Flash shape as a GGUF (model/v41_random_model.h, metadata only) plans the
// same KV as the hand-written preset: the seed example's 39081024 allocator tokens.
TEST(GgufKvConfig, FlashShapeGgufMatchesThePreset) {
  const std::string path =
      (fs::temp_directory_path() / ("kvserve_flash_" + std::to_string(getpid()) + ".gguf"))
          .string();
  Result<model::V41ModelSpec> spec = model::FindV41Preset("v41-flash-shape");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(model::V41ModelWriter(*spec)->Write(path).ok());
  Result<ModelDesc> gguf = LoadGgufModel(path);
  fs::remove(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  Result<ModelDesc> preset = LoadModelPreset("deepseek-v4.1-flash");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  const uint64_t pool = 41344183649;  // the seed example's 38.50 GiB per card
  Result<kv::KvCacheConfig> a = PlanKvConfig(*gguf, 4, 16, 1048576, 8192, "auto");
  Result<kv::KvCacheConfig> b = PlanKvConfig(*preset, 4, 16, 1048576, 8192, "auto");
  ASSERT_TRUE(a.ok() && b.ok());
  Result<kv::KvCapacity> ca = kv::ComputeCapacity(*a, pool);
  Result<kv::KvCapacity> cb = kv::ComputeCapacity(*b, pool);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ(ca->num_tokens, 39081024);
  EXPECT_EQ(cb->num_tokens, 39081024);
  ASSERT_EQ(ca->groups.size(), cb->groups.size());
  for (size_t g = 0; g < ca->groups.size(); ++g) {
    EXPECT_EQ(ca->groups[g].num_blocks, cb->groups[g].num_blocks) << g;
    EXPECT_EQ(ca->groups[g].block_bytes, cb->groups[g].block_bytes) << g;
  }
}

// Gemma 3's 5:1 pattern: the planner sees the server's two groups, the global layers full and
// the others sliding over the file's window, and plans exactly the server's config.
TEST(GgufKvConfig, Gemma3SlidingAndFullGroups) {
  const std::string path =
      (fs::temp_directory_path() / ("kvserve_gguf_gemma3_" + std::to_string(getpid()) + ".gguf"))
          .string();
  Result<model::DenseSpec> spec = model::FindDensePreset("gemma3", "tiny");
  ASSERT_TRUE(spec.ok());
  model::RandomWeights weights;
  weights.matrix_type = DType::kQ8_0;
  ASSERT_TRUE(model::DenseRandomWriter(*spec, weights)->Write(path).ok());
  Result<ModelDesc> model = LoadGgufModel(path);
  auto file = gguf::GgufFile::Open(path);
  fs::remove(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(model->kv_groups.size(), 2u);
  EXPECT_EQ(model->kv_groups[0].name, "full");
  EXPECT_EQ(model->kv_groups[0].layers, std::vector<int>{5});
  EXPECT_EQ(model->kv_groups[1].name, "sliding");
  EXPECT_EQ(FormatLayerList(model->kv_groups[1].layers), "0-4,6-7");
  EXPECT_EQ(std::get<kv::SlidingWindow>(model->kv_groups[1].spec).window, 16);
  EXPECT_EQ(std::get<kv::SlidingWindow>(model->kv_groups[1].spec).head_dim, 64);
  for (const char* flag : {"auto", "fp8"}) {
    Result<model::ModelKvLayout> layout = model::MakeModelKvLayout(**file, {flag, 16, 1024, 256});
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    Result<kv::KvCacheConfig> planned = PlanKvConfig(*model, 1, 16, 1024, 256, flag);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    ExpectSameConfig(*planned, layout->config);
  }
  // One KV head: replicated under TP.
  Result<kv::KvCacheConfig> tp2 = PlanKvConfig(*model, 2, 16, 1024, 256, "auto");
  ASSERT_TRUE(tp2.ok()) << tp2.status().ToString();
  EXPECT_EQ(std::get<kv::FullAttention>(tp2->groups[0].spec).num_kv_heads, 1);
}

// The DeepSeek-V3 shape as a deepseek2 GGUF (make-model --arch deepseek2 --preset deepseek-v3,
// metadata only) plans the same latent KV as the hand-written preset (BF16 latents: 61 layers x
// 576 dims x 2 B = 70272 B per token, replicated on every TP rank), and MakeModelKvLayout (what
// serve allocates) is that config.
TEST(GgufKvConfig, DeepseekV3ShapeGgufMatchesThePreset) {
  const std::string path =
      (fs::temp_directory_path() / ("kvserve_dsv3_" + std::to_string(getpid()) + ".gguf")).string();
  Result<model::Deepseek2Spec> spec = model::FindDeepseek2Preset("deepseek-v3");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(model::Deepseek2RandomWriter(*spec, model::RandomWeights{})->Write(path).ok());
  Result<ModelDesc> gguf = LoadGgufModel(path);
  auto file = gguf::GgufFile::Open(path);
  fs::remove(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  ASSERT_TRUE(file.ok());
  Result<ModelDesc> preset = LoadModelPreset("deepseek-v3");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  const uint64_t pool = 41440717538;  // `plan --model deepseek-v3 --gpu h200 --tp 8`'s pool
  Result<kv::KvCacheConfig> a = PlanKvConfig(*gguf, 8, 16, 163840, 8192, "bf16");
  Result<kv::KvCacheConfig> b = PlanKvConfig(*preset, 8, 16, 163840, 8192, "auto");
  ASSERT_TRUE(a.ok() && b.ok());
  model::KvLayoutOptions options{"bf16", 16, 163840, 8192};
  Result<model::ModelKvLayout> served = model::MakeModelKvLayout(**file, options);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  ExpectSameConfig(*a, served->config);
  Result<kv::KvCapacity> ca = kv::ComputeCapacity(*a, pool);
  Result<kv::KvCapacity> cb = kv::ComputeCapacity(*b, pool);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ(ca->bytes_per_token, 70272.0);
  EXPECT_EQ(cb->bytes_per_token, 70272.0);
  EXPECT_EQ(ca->num_tokens, cb->num_tokens);
  EXPECT_EQ(ca->num_tokens, 589696);
}

// A published shape as a make-model GGUF of `arch` (metadata only) against the planner's
// hand-written preset of the same model: MakeModelKvLayout (what serve allocates for the file)
// is the planner's TP-1 config of the file, and at each TP the file and the preset plan the same
// groups (in any order) and token capacity (BF16 KV, 40 GiB pool). Returns the file's capacity
// per TP.
std::vector<kv::KvCapacity> ExpectShapeGgufPlansAsPreset(const char* arch, const char* preset,
                                                         int64_t max_len,
                                                         std::initializer_list<int> tps) {
  const std::string path = (fs::temp_directory_path() /
                            (std::string("kvserve_") + preset + std::to_string(getpid()) + ".gguf"))
                               .string();
  std::vector<kv::KvCapacity> out;
  Result<model::DenseSpec> spec = model::FindDensePreset(arch, preset);
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return out;
  EXPECT_TRUE(model::DenseRandomWriter(*spec, model::RandomWeights{})->Write(path).ok());
  Result<ModelDesc> gguf = LoadGgufModel(path);
  auto file = gguf::GgufFile::Open(path);
  fs::remove(path);
  Result<ModelDesc> planned = LoadModelPreset(preset);
  EXPECT_TRUE(gguf.ok() && file.ok() && planned.ok());
  if (!gguf.ok() || !file.ok() || !planned.ok()) return out;
  Result<model::ModelKvLayout> served =
      model::MakeModelKvLayout(**file, {"bf16", 16, max_len, 8192});
  Result<kv::KvCacheConfig> tp1 = PlanKvConfig(*gguf, 1, 16, max_len, 8192, "bf16");
  EXPECT_TRUE(served.ok() && tp1.ok());
  if (!served.ok() || !tp1.ok()) return out;
  ExpectSameConfig(*tp1, served->config);
  for (int tp : tps) {
    SCOPED_TRACE(tp);
    Result<kv::KvCacheConfig> a = PlanKvConfig(*gguf, tp, 16, max_len, 8192, "bf16");
    Result<kv::KvCacheConfig> b = PlanKvConfig(*planned, tp, 16, max_len, 8192, "auto");
    EXPECT_TRUE(a.ok() && b.ok());
    if (!a.ok() || !b.ok()) return out;
    EXPECT_EQ(a->max_model_len, b->max_model_len);
    EXPECT_EQ(SortedGroups(*a), SortedGroups(*b));
    Result<kv::KvCapacity> ca = kv::ComputeCapacity(*a, uint64_t{40} << 30);
    Result<kv::KvCapacity> cb = kv::ComputeCapacity(*b, uint64_t{40} << 30);
    EXPECT_TRUE(ca.ok() && cb.ok());
    if (!ca.ok() || !cb.ok()) return out;
    EXPECT_EQ(ca->num_tokens, cb->num_tokens);
    EXPECT_EQ(ca->bytes_per_token, cb->bytes_per_token);
    out.push_back(*ca);
  }
  return out;
}

// Qwen3-30B-A3B (make-model --arch qwen3moe --preset qwen3-30b-a3b): BF16 2 x 48 layers x 4 KV
// heads x 128 dims x 2 B = 98304 B per token; at TP 4 one KV head per rank.
TEST(GgufKvConfig, Qwen3MoeShapeGgufMatchesThePreset) {
  const std::vector<kv::KvCapacity> c =
      ExpectShapeGgufPlansAsPreset("qwen3moe", "qwen3-30b-a3b", 40960, {1, 4});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].bytes_per_token, 98304.0);
  EXPECT_EQ(c[1].bytes_per_token, 98304.0 / 4);
}

// gpt-oss-20b (make-model --arch gpt-oss --preset gpt-oss-20b): the hybrid KV of a sliding group
// (the 12 even layers, 128-token windows) and a full group (the 12 odd ones), each 8 KV heads x
// 64 dims: the full group holds 2 x 12 x 8 x 64 x 2 B = 24576 B per token in BF16; the sliding
// group a fixed ceil((128 + 8192 chunk) / 16) + 1 = 521 blocks of 16 tokens per sequence. At
// TP 2 each rank holds 4 of the KV heads.
TEST(GgufKvConfig, GptOssShapeGgufMatchesThePreset) {
  const std::vector<kv::KvCapacity> c =
      ExpectShapeGgufPlansAsPreset("gpt-oss", "gpt-oss-20b", 131072, {1, 2});
  ASSERT_EQ(c.size(), 2u);
  for (int tp : {1, 2}) {
    SCOPED_TRACE(tp);
    const kv::KvCapacity& cap = c[tp - 1];
    ASSERT_EQ(cap.groups.size(), 2u);  // the file's order: full, then sliding
    EXPECT_EQ(cap.groups[0].bytes_per_token.bytes, 24576.0 / tp);
    EXPECT_EQ(cap.groups[0].max_blocks_per_request, 131072 / 16);
    EXPECT_EQ(cap.groups[1].bytes_per_token.bytes, 24576.0 / tp);
    EXPECT_EQ(cap.groups[1].block_bytes, 16 * 24576 / tp);
    EXPECT_EQ(cap.groups[1].max_blocks_per_request, 521);
  }
}

TEST(GgufKvConfig, Stories260KDtypeAndTp) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (../shared absent)";
  Result<ModelDesc> model = LoadGgufModel(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  Result<model::ModelConfig> mc = model::ReadModelConfig(**file);
  ASSERT_TRUE(mc.ok()) << mc.status().ToString();
  // The engine's path (engine::ResolveKvLayout): MakeModelKvLayout over the file's KV shape.
  for (const char* flag : {"auto", "f32", "f16", "bf16", "q8_0", "fp8", "fp4"}) {
    SCOPED_TRACE(flag);
    Result<model::ModelKvLayout> layout = model::MakeModelKvLayout(**file, {flag, 16, 512, 2048});
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    const kv::KvCacheConfig& engine = layout->config;
    Result<kv::KvCacheConfig> planned = PlanKvConfig(*model, 1, 16, 512, 2048, flag);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    ExpectSameConfig(*planned, engine);
    for (uint64_t budget : {uint64_t{1} << 20, uint64_t{8} << 20}) {
      Result<kv::KvCapacity> a = kv::ComputeCapacity(*planned, budget);
      Result<kv::KvCapacity> b = kv::ComputeCapacity(engine, budget);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->num_tokens, b->num_tokens);
      EXPECT_EQ(a->total_arena_bytes, b->total_arena_bytes);
    }
  }
  // f32 weights: auto is f32 KV.
  EXPECT_EQ(std::get<kv::FullAttention>(model->kv_groups[0].spec).dtype, DType::kF32);
  // TP: 4 KV heads split over 2 ranks; 3 neither divides nor is divided by 4.
  Result<kv::KvCacheConfig> tp2 = PlanKvConfig(*model, 2, 16, 512, 2048, "auto");
  ASSERT_TRUE(tp2.ok()) << tp2.status().ToString();
  EXPECT_EQ(std::get<kv::FullAttention>(tp2->groups[0].spec).num_kv_heads, 2);
  EXPECT_FALSE(PlanKvConfig(*model, 3, 16, 512, 2048, "auto").ok());
  EXPECT_FALSE(PlanKvConfig(*model, 1, 16, 512, 2048, "q5_k").ok());
}

}  // namespace
}  // namespace kvserve::planner
