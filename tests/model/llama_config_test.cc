// ModelConfig validation (clear errors for missing or inconsistent metadata) and the forward pass
// of random-weight models (tied output, linear RoPE scaling, partial RoPE, MQA) against the
// float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/dense.h"
#include "model/dense_random.h"
#include "reference_dense.h"
#include "support/gguf_buffer.h"
#include "support/kv_arena.h"

namespace kvserve::model {
namespace {

// Expects ReadModelConfig to fail with a message containing `needle`.
void ExpectConfigError(const gguf::GgufWriter& w, const std::string& needle) {
  auto config = ReadModelConfig(*testing::ParseWriter(w));
  ASSERT_FALSE(config.ok()) << "expected an error about " << needle;
  EXPECT_NE(config.status().message().find(needle), std::string::npos)
      << config.status().ToString();
}

// A random llama of `spec` (model/dense_random.h) with norm weights near 1.
struct RandomSpec : DenseSpec {
  uint64_t seed = 1;
  tensor::DType matrix_dtype = tensor::DType::kF32;
};
gguf::GgufWriter Writer(const RandomSpec& spec) {
  RandomWeights weights;
  weights.matrix_type = spec.matrix_dtype;
  weights.seed = spec.seed;
  weights.norm_spread = 0.1f;
  Result<gguf::GgufWriter> w = DenseRandomWriter(spec, weights);
  CHECK(w.ok()) << w.status().ToString();
  return std::move(w).value();
}

TEST(ModelConfigTest, ReadsMetadataAndDefaults) {
  RandomSpec spec;
  spec.tied_output = true;
  auto config = ReadModelConfig(*testing::ParseWriter(Writer(spec)));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->dim, 64);
  EXPECT_EQ(config->head_dim, 16);
  EXPECT_EQ(config->num_kv_heads, 2);
  EXPECT_EQ(config->rope_dim, 16);  // default head_dim
  EXPECT_EQ(config->rope_freq_base, 10000.0);
  EXPECT_EQ(config->rope_linear_scale, 1.0);
  EXPECT_EQ(config->vocab_size, 128);
  EXPECT_TRUE(config->tied_output);

  gguf::GgufWriter w = Writer({});
  w.Set("llama.rope.scaling.type", gguf::Value::Str("linear"));
  w.Set("llama.rope.scaling.factor", gguf::Value::F32(4.0f));
  w.Set("llama.rope.freq_base", gguf::Value::F32(500000.0f));
  auto scaled = ReadModelConfig(*testing::ParseWriter(w));
  ASSERT_TRUE(scaled.ok()) << scaled.status().ToString();
  EXPECT_EQ(scaled->rope_linear_scale, 4.0);
  EXPECT_EQ(scaled->rope_freq_base, 500000.0);
}

TEST(ModelConfigTest, RejectsMissingOrInconsistentMetadata) {
  gguf::GgufWriter w = Writer({});
  w.Set("llama.attention.head_count", gguf::Value::U32(5));
  ExpectConfigError(w, "does not divide embedding_length");

  w = Writer({});
  w.Set("llama.attention.head_count_kv", gguf::Value::U32(3));
  ExpectConfigError(w, "does not divide head_count");

  w = Writer({});
  w.Set("llama.rope.dimension_count", gguf::Value::U32(7));
  ExpectConfigError(w, "rope.dimension_count");

  w = Writer({});
  w.Set("llama.rope.scaling.type", gguf::Value::Str("yarn"));  // supported, but not shrinking
  w.Set("llama.rope.scaling.factor", gguf::Value::F32(0.5f));
  ExpectConfigError(w, "yarn");

  w = Writer({});
  w.Set("llama.feed_forward_length", gguf::Value::U32(100));
  ExpectConfigError(w, "blk.0.ffn_gate.weight");  // shape mismatch names the tensor

  w = Writer({});
  w.Set("general.architecture", gguf::Value::Str("gpt2"));
  ExpectConfigError(w, "gpt2");

  w = Writer({});
  w.Set("llama.block_count", gguf::Value::U32(3));  // the file has 2 layers
  ExpectConfigError(w, "blk.2.attn_norm.weight");

  // A missing required key: build the metadata without it.
  gguf::GgufWriter missing;
  std::shared_ptr<const gguf::GgufFile> full = testing::ParseWriter(Writer({}));
  for (const auto& [key, value] : full->metadata()) {
    if (key != "llama.embedding_length") missing.Set(key, value);
  }
  ExpectConfigError(missing, "llama.embedding_length");
}

// A copy of `file` without tensor `drop`, and with `replace` (if any) added in its place.
gguf::GgufWriter Rebuild(const gguf::GgufFile& file, const std::string& drop,
                         const std::function<void(gguf::GgufWriter&)>& replace) {
  gguf::GgufWriter w;
  for (const auto& [key, value] : file.metadata()) w.Set(key, value);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == drop) {
      if (replace) replace(w);
      continue;
    }
    const auto* begin = reinterpret_cast<const uint8_t*>(t.data);
    CHECK(w.AddTensor(t.name, t.dims, *t.dtype, std::vector<uint8_t>(begin, begin + t.size_bytes))
              .ok());
  }
  return w;
}

TEST(ModelConfigTest, RejectsMissingTensorsAndUnusableDTypes) {
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Writer({}));
  ExpectConfigError(Rebuild(*file, "blk.1.ffn_up.weight", nullptr), "blk.1.ffn_up.weight");
  ExpectConfigError(Rebuild(*file, "token_embd.weight", nullptr), "token_embd.weight");
  // Norm weights must be F32.
  ExpectConfigError(Rebuild(*file, "blk.0.ffn_norm.weight",
                            [](gguf::GgufWriter& w) {
                              CHECK(w.AddTensor("blk.0.ffn_norm.weight", {64}, tensor::DType::kF16,
                                                std::vector<uint8_t>(128))
                                        .ok());
                            }),
                    "blk.0.ffn_norm.weight");
  // Missing output.weight means tied output, not an error.
  auto tied = ReadModelConfig(*testing::ParseWriter(Rebuild(*file, "output.weight", nullptr)));
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_TRUE(tied->tied_output);
  // Quantized weights of every GGUF type the matmul reads are accepted.
  for (tensor::DType t :
       {tensor::DType::kF16, tensor::DType::kBF16, tensor::DType::kQ8_0, tensor::DType::kQ4_0}) {
    RandomSpec spec;
    spec.matrix_dtype = t;
    EXPECT_TRUE(ReadModelConfig(*testing::ParseWriter(Writer(spec))).ok()) << tensor::DTypeName(t);
  }
}

// A tensor of a ggml type kvserve does not compute with is refused at load, naming the type by
// ggml's name and the tensor (here the type id of blk.0.ffn_down.weight is patched to TQ2_0).
TEST(ModelConfigTest, NamesUnsupportedGgmlTypeAndTensor) {
  RandomSpec spec;
  spec.ffn_dim = 256;  // TQ2_0 rows are blocks of 256
  spec.matrix_dtype = tensor::DType::kQ8_0;
  std::vector<uint8_t> bytes = Writer(spec).Serialize();
  const std::string name = "blk.0.ffn_down.weight";
  auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  // name, u32 n_dims (2), 2 x u64 dims, then the u32 type.
  const size_t type_at = static_cast<size_t>(at - bytes.begin()) + name.size() + 4 + 16;
  ASSERT_EQ(bytes[type_at], 8);  // Q8_0
  bytes[type_at] = 35;           // TQ2_0
  auto file = gguf::GgufFile::FromBuffer(std::move(bytes));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto config = ReadModelConfig(**file);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("tensor 'blk.0.ffn_down.weight' has ggml type tq2_0"),
            std::string::npos)
      << config.status().ToString();
}

// Prefill in chunks of 5, then greedy decode, against the float64 reference.
void CompareWithReference(const RandomSpec& spec, int prompt_len, int num_decode) {
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Writer(spec));
  LoadOptions options;
  options.max_batch_tokens = 8;
  options.max_threads = 2;
  auto model = DenseModel::Load(file, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ref = model_test::ReferenceDense::Create(*file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const ModelConfig& c = (*model)->config();
  testing::SimpleKvArena arena(static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                               static_cast<int>(c.head_dim), tensor::DType::kF32, 16, 4);
  const std::vector<int32_t> table_ids = {3, 1, 0, 2};
  const std::span<const int32_t> table[] = {table_ids};
  ThreadPool pool(2);
  std::vector<int32_t> ids;
  for (int i = 0; i < prompt_len; ++i)
    ids.push_back((i * 37 + 11) % static_cast<int>(c.vocab_size));
  std::vector<float> logits(c.vocab_size);
  std::vector<double> want;
  for (int32_t t : ids) want = (*ref)->Step(t);
  for (int start = 0; start < prompt_len; start += 5) {
    const int n = std::min(5, prompt_len - start);
    Batch batch;
    batch.sequences = {
        {std::span<const int32_t>(ids).subspan(start, n), start, table, start + n == prompt_len}};
    (*model)->Forward(batch, arena.views(), pool, logits.data());
  }
  for (int step = 0;; ++step) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(logits[i] - want[i]));
      max_ref = std::max(max_ref, std::abs(want[i]));
    }
    ASSERT_LE(max_diff / max_ref, 1e-4) << "step " << step;
    if (step == num_decode) break;
    ids.push_back(static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
    Batch batch;
    batch.sequences = {{std::span<const int32_t>(&ids.back(), 1),
                        static_cast<int32_t>(ids.size()) - 1, table, true}};
    (*model)->Forward(batch, arena.views(), pool, logits.data());
    want = (*ref)->Step(ids.back());
  }
}

TEST(LlamaRandomModelTest, TiedOutputScaledPartialRopeMqaMatchesReference) {
  RandomSpec spec;
  spec.tied_output = true;
  spec.num_kv_heads = 1;
  spec.rope_dim = 8;
  spec.rope_freq_base = 500000.0;
  spec.rope_linear_scale = 4.0;
  spec.seed = 99;
  CompareWithReference(spec, 23, 10);
}

TEST(LlamaRandomModelTest, MultiHeadAttentionMatchesReference) {
  RandomSpec spec;
  spec.num_heads = 8;
  spec.num_kv_heads = 8;
  spec.num_layers = 3;
  spec.seed = 5;
  CompareWithReference(spec, 17, 6);
}

}  // namespace
}  // namespace kvserve::model
