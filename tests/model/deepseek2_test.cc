// deepseek2 (MLA + MoE) against the independent float64 reference (reference_deepseek2.cc):
// greedy tokens and logprobs on random weights, the router's rules, and config errors.
#include "model/deepseek2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/deepseek2_random.h"
#include "model/moe.h"
#include "reference_deepseek2.h"
#include "support/temp_path.h"
#include "tensor/dtype.h"

namespace kvserve::model {
namespace {

constexpr int kBlock = 16;

// One latent row per token per layer in contiguous blocks: the deepseek2 KV group.
class LatentArena {
 public:
  LatentArena(int layers, int latent_dim, tensor::DType dtype, int32_t blocks) {
    const size_t row = static_cast<size_t>(tensor::RowBytes(dtype, latent_dim));
    const size_t block = row * kBlock;
    storage_.assign(block * blocks * layers, std::byte{0});
    tensor::PagedLatentView v;
    v.block_size = kBlock;
    v.latent_dtype = dtype;
    v.latent_elems = latent_dim;
    for (int l = 0; l < layers; ++l) {
      v.layers.push_back({storage_.data() + block * blocks * l, nullptr, block, row, 0});
    }
    views_.paged.resize(1);
    views_.latent = {v};
  }
  const KvViews& views() const { return views_; }

 private:
  std::vector<std::byte> storage_;
  KvViews views_;
};

std::string WriteModel(const std::string& preset, tensor::DType type) {
  Result<Deepseek2Spec> spec = FindDeepseek2Preset(preset);
  CHECK(spec.ok());
  RandomWeights weights;
  weights.matrix_type = type;
  weights.seed = 7;
  weights.norm_spread = 0.2f;
  Result<gguf::GgufWriter> w = Deepseek2RandomWriter(*spec, weights);
  CHECK(w.ok()) << w.status().ToString();
  const std::string path = kvserve::testing::TempPath("ds2_" + preset + ".gguf");
  CHECK(w->Write(path).ok());
  return path;
}

std::vector<double> LogSoftmax(const float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mx - std::log(sum);
  return out;
}

std::vector<double> LogSoftmax(const std::vector<double>& x) {
  std::vector<float> f(x.begin(), x.end());
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - mx - std::log(sum);
  return out;
}

void ExpectMatchesReference(const std::string& preset) {
  auto opened = gguf::GgufFile::Open(WriteModel(preset, tensor::DType::kF32));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<const gguf::GgufFile> file = std::move(opened).value();
  LoadOptions options;
  options.max_batch_tokens = 16;
  options.max_threads = 2;
  options.max_context_tokens = 256;
  auto model = Deepseek2Model::Load(file, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ref = model_test::ReferenceDeepseek2::Create(*file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const Deepseek2Config& c = (*model)->config();
  LatentArena arena(static_cast<int>(c.num_layers), static_cast<int>(c.latent_dim()),
                    tensor::DType::kF32, 16);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = 15 - i;  // blocks out of order on purpose
  std::vector<std::span<const int32_t>> tables = {table};
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = {1, 300, 17, 451, 99, 260, 5, 402};
  std::vector<float> logits(c.vocab_size);
  // Prefill the prompt in one step (the reference goes token by token).
  Batch batch;
  batch.sequences.push_back({prompt, 0, tables, 1});
  (*model)->Forward(batch, arena.views(), pool, logits.data());
  std::vector<double> want;
  for (int32_t t : prompt) want = (*ref)->Step(t);
  int32_t pos = static_cast<int32_t>(prompt.size());
  double max_diff = 0;
  std::vector<int32_t> got_tokens;
  for (int step = 0; step < 32; ++step) {
    const std::vector<double> got_lp = LogSoftmax(logits.data(), c.vocab_size);
    const std::vector<double> want_lp = LogSoftmax(want);
    for (int64_t i = 0; i < c.vocab_size; ++i) {
      max_diff = std::max(max_diff, std::abs(got_lp[i] - want_lp[i]));
    }
    const int32_t got =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const int32_t expect =
        static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
    ASSERT_EQ(got, expect) << preset << " step " << step;
    got_tokens.push_back(got);
    const std::vector<int32_t> one = {got};
    Batch decode;
    decode.sequences.push_back({one, pos++, tables, 1});
    (*model)->Forward(decode, arena.views(), pool, logits.data());
    want = (*ref)->Step(got);
  }
  EXPECT_LT(max_diff, 1e-4) << preset;
  // Outputs that vary: a random model that repeats one token would prove little.
  std::sort(got_tokens.begin(), got_tokens.end());
  EXPECT_GE(std::unique(got_tokens.begin(), got_tokens.end()) - got_tokens.begin(), 4) << preset;
}

TEST(Deepseek2Test, TinyV3ShapeMatchesFloat64Reference) {
  ExpectMatchesReference("tiny");
}

TEST(Deepseek2Test, TinyLiteShapeMatchesFloat64Reference) {
  ExpectMatchesReference("tiny-lite");
}

TEST(Deepseek2Test, KvShapeIsOneLatentPerLayer) {
  auto file = gguf::GgufFile::Open(WriteModel("tiny-lite", tensor::DType::kF16));
  ASSERT_TRUE(file.ok());
  auto layout = MakeModelKvLayout(**file, KvLayoutOptions{});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->config.groups.size(), 1u);
  const auto& spec = std::get<kv::CompressedLatent>(layout->config.groups[0].spec);
  EXPECT_EQ(spec.latent_dim, 96);
  EXPECT_EQ(spec.compress_ratio, 1);
  EXPECT_EQ(spec.index_key_dim, 0);
  EXPECT_EQ(spec.latent_dtype, tensor::DType::kF16);
  EXPECT_EQ(layout->config.groups[0].layers.size(), 3u);
  EXPECT_TRUE(layout->config.groups[0].readers.empty());
}

TEST(Deepseek2Test, V2LiteShapeLatentBytes) {
  Result<Deepseek2Spec> spec = FindDeepseek2Preset("deepseek-v2-lite");
  ASSERT_TRUE(spec.ok());
  Result<gguf::GgufWriter> w = Deepseek2RandomWriter(*spec, RandomWeights{});
  ASSERT_TRUE(w.ok());
  const std::string path = kvserve::testing::TempPath("v2lite_shape.gguf");
  ASSERT_TRUE(w->Write(path).ok());
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  KvLayoutOptions options;
  options.kv_cache_dtype = "f16";
  auto layout = MakeModelKvLayout(**file, options);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const kv::BytesPerToken b = kv::ComputeBytesPerToken(layout->config.groups[0].spec, 27);
  EXPECT_EQ(b.bytes, 31104.0);  // 27 layers x 576 dims x 2 B
  auto config = ReadDeepseek2Config(**file);
  ASSERT_TRUE(config.ok());
  EXPECT_NE(DescribeDeepseek2PlainKv(*config, tensor::DType::kF16).find("= 276480 B"),
            std::string::npos);
  std::shared_ptr<const gguf::GgufFile> shared = std::move(file).value();
  auto model = Deepseek2Model::Load(shared, LoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("shape-only"), std::string::npos);
}

TEST(MoeRouteTest, TopKTiesGoToTheLowerExpert) {
  MoeConfig c;
  c.num_experts = 6;
  c.top_k = 2;
  const float logits[6] = {0.5f, 2.0f, 1.0f, 2.0f, 2.0f, -1.0f};
  int32_t chosen[2];
  float w[2];
  RouteToken(c, nullptr, logits, chosen, w);
  EXPECT_EQ(chosen[0], 1);
  EXPECT_EQ(chosen[1], 3);
  EXPECT_EQ(w[0], w[1]);
}

// Expert counts are bounded only by the file's tensors: 2048 experts (past any fixed buffer)
// route like a full sort of the probabilities, ties to the lower index.
TEST(MoeRouteTest, ManyExpertsRouteAsAFullSort) {
  MoeConfig c;
  c.num_experts = 2048;
  c.top_k = 8;
  c.norm_topk = true;
  std::vector<float> logits(2048);
  for (int e = 0; e < 2048; ++e) logits[e] = static_cast<float>((e * 7919) % 1021) / 97.0f;
  logits[1500] = logits[3] = 20.0f;  // a tie at the top: 3 first
  std::vector<int32_t> chosen(8);
  std::vector<float> w(8);
  RouteToken(c, nullptr, logits.data(), chosen.data(), w.data());
  std::vector<int32_t> order(2048);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int k = 0; k < 8; ++k) EXPECT_EQ(chosen[k], order[k]) << "k=" << k;
  EXPECT_EQ(chosen[0], 3);
  float sum = 0.0f;
  for (float v : w) sum += v;
  EXPECT_NEAR(sum, 1.0f, 1e-6);
}

TEST(MoeRouteTest, SigmoidSelectionBiasNormAndScale) {
  MoeConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  c.gating = ExpertGating::kSigmoid;
  c.norm_topk = true;
  c.weights_scale = 2.5f;
  const float logits[4] = {0.0f, 1.0f, 0.5f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 1.0f};  // picks expert 3, weighs it by its prob
  int32_t chosen[2];
  float w[2];
  RouteToken(c, bias, logits, chosen, w);
  EXPECT_EQ(chosen[0], 3);
  EXPECT_EQ(chosen[1], 1);
  const double p3 = 1 / (1 + std::exp(1.0)), p1 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(w[0], 2.5 * p3 / (p3 + p1), 1e-6);
  EXPECT_NEAR(w[1], 2.5 * p1 / (p3 + p1), 1e-6);
}

TEST(Deepseek2Test, MissingKeyIsAClearError) {
  Result<Deepseek2Spec> spec = FindDeepseek2Preset("tiny");
  ASSERT_TRUE(spec.ok());
  Result<gguf::GgufWriter> w = Deepseek2RandomWriter(*spec, RandomWeights{});
  ASSERT_TRUE(w.ok());
  w->Set("deepseek2.expert_used_count", gguf::Value::U32(9));  // > expert_count 8
  const std::string path = kvserve::testing::TempPath("ds2_bad.gguf");
  ASSERT_TRUE(w->Write(path).ok());
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto config = ReadDeepseek2Config(**file);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("expert_used_count"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::model
