// ModelConfig of the non-llama architectures: what each reads from llama.cpp's keys and
// tensors (RoPE pairing, windows per layer, soft-caps, attention scale, fused projections,
// biases, q/k norms), and clear errors when a file lacks what its architecture needs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/dense_random.h"
#include "model/kv_layout.h"
#include "support/gguf_buffer.h"

namespace kvserve::model {
namespace {

gguf::GgufWriter Preset(const std::string& arch, const std::string& preset = "tiny") {
  Result<DenseSpec> spec = FindDensePreset(arch, preset);
  CHECK(spec.ok()) << spec.status().ToString();
  Result<gguf::GgufWriter> w = DenseRandomWriter(*spec, RandomWeights{});
  CHECK(w.ok()) << w.status().ToString();
  return std::move(w).value();
}

// A copy of the preset's file without tensor `drop`.
gguf::GgufWriter Without(const std::string& arch, const std::string& drop) {
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Preset(arch));
  gguf::GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (t.name == drop) continue;
    const auto* begin = reinterpret_cast<const uint8_t*>(t.data);
    CHECK(w.AddTensor(t.name, t.dims, *t.dtype, std::vector<uint8_t>(begin, begin + t.size_bytes))
              .ok());
  }
  return w;
}

void ExpectError(const gguf::GgufWriter& w, const std::string& needle) {
  Result<ModelConfig> c = ReadModelConfig(*testing::ParseWriter(w));
  ASSERT_FALSE(c.ok()) << "expected an error about " << needle;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().ToString();
}

TEST(DenseConfigTest, EachArchitectureReadsItsConventions) {
  Result<ModelConfig> qwen2 = ReadModelConfig(*testing::ParseWriter(Preset("qwen2")));
  ASSERT_TRUE(qwen2.ok()) << qwen2.status().ToString();
  EXPECT_EQ(qwen2->rope_style, kernels::RopeStyle::kNeox);
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->qk_norm);

  Result<ModelConfig> qwen3 = ReadModelConfig(*testing::ParseWriter(Preset("qwen3")));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().ToString();
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_dim, 48);  // attention.key_length, not dim / heads = 32
  EXPECT_EQ(qwen3->q_row_elems(), 192);
  EXPECT_FLOAT_EQ(qwen3->attention_scale, 1.0f / std::sqrt(48.0f));

  Result<ModelConfig> phi3 = ReadModelConfig(*testing::ParseWriter(Preset("phi3")));
  ASSERT_TRUE(phi3.ok()) << phi3.status().ToString();
  EXPECT_TRUE(phi3->fused_qkv);
  EXPECT_TRUE(phi3->fused_gate_up);
  EXPECT_EQ(phi3->rope_dim, 24);
  EXPECT_EQ(phi3->rope_original_context, 1024);
  EXPECT_EQ(phi3->rope_factors_long, "rope_factors_long.weight");
  EXPECT_NEAR(phi3->rope_attn_factor, std::sqrt(1 + std::log(4.0) / std::log(1024.0)), 1e-6);

  Result<ModelConfig> gemma2 = ReadModelConfig(*testing::ParseWriter(Preset("gemma2")));
  ASSERT_TRUE(gemma2.ok()) << gemma2.status().ToString();
  EXPECT_EQ(gemma2->activation, FfnActivation::kGeluTanh);
  EXPECT_TRUE(gemma2->post_norms);
  EXPECT_TRUE(gemma2->tied_output);
  EXPECT_EQ(gemma2->attn_softcap, 4.0f);
  EXPECT_EQ(gemma2->final_softcap, 8.0f);
  EXPECT_FLOAT_EQ(gemma2->embedding_scale, std::sqrt(128.0f));
  EXPECT_EQ(gemma2->layer_window, (std::vector<int32_t>{16, 0, 16, 0}));  // even layers slide

  Result<ModelConfig> gemma3 = ReadModelConfig(*testing::ParseWriter(Preset("gemma3")));
  ASSERT_TRUE(gemma3.ok()) << gemma3.status().ToString();
  EXPECT_TRUE(gemma3->qk_norm);
  EXPECT_FALSE(gemma3->attn_softcap.has_value());
  EXPECT_FALSE(gemma3->final_softcap.has_value());
  EXPECT_EQ(gemma3->layer_window, (std::vector<int32_t>{16, 16, 16, 16, 16, 0, 16, 16}));
  EXPECT_EQ(gemma3->rope_freq_base, 1000000.0);  // global layers: the file's base and scaling
  EXPECT_EQ(gemma3->rope_linear_scale, 8.0);
  EXPECT_EQ(gemma3->rope_freq_base_sliding, 10000.0);  // local layers: 10000, unscaled
  EXPECT_EQ(gemma3->rope_linear_scale_sliding, 1.0);
}

TEST(DenseConfigTest, GemmaDefaultsAndTheLargeModelQueryScale) {
  // gemma2 without window or soft-cap keys: llama.cpp's defaults 4096, 50 and 30.
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Preset("gemma2"));
  gguf::GgufWriter w;
  for (const auto& [key, value] : file->metadata()) {
    if (key != "gemma2.attention.sliding_window" && key != "gemma2.attn_logit_softcapping" &&
        key != "gemma2.final_logit_softcapping") {
      w.Set(key, value);
    }
  }
  w.Set("gemma2.block_count", gguf::Value::U32(46));  // the 27B depth: scale 1/sqrt(dim/heads)
  Result<ModelConfig> c = ReadModelHyperparameters(*testing::ParseWriter(w));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->layer_window[0], 4096);
  EXPECT_EQ(c->attn_softcap, 50.0f);
  EXPECT_EQ(c->final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c->attention_scale, 1.0f / std::sqrt(128.0f / 4.0f));
  // The KV layout the planner and serve use: the windows as the forward pass reads them.
  Result<ModelKvShape> shape = ReadDenseKvShape(*testing::ParseWriter(w));
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  const auto& dense = std::get<DenseKvShape>(shape->layout);
  EXPECT_EQ(dense.head_dim, 32);
  EXPECT_EQ(DenseKvGroups(dense).size(), 2u);
}

TEST(DenseConfigTest, MissingPiecesAreClearErrors) {
  ExpectError(Without("qwen2", "blk.1.attn_k.bias"), "blk.1.attn_k.bias");
  ExpectError(Without("qwen3", "blk.0.attn_q_norm.weight"), "blk.0.attn_q_norm.weight");
  ExpectError(Without("gemma2", "blk.3.post_ffw_norm.weight"), "blk.3.post_ffw_norm.weight");
  ExpectError(Without("phi3", "blk.2.attn_qkv.weight"), "blk.2.attn_qkv.weight");
  ExpectError(Without("phi3", "rope_factors_short.weight"), "rope_factors_short.weight");
  // gemma3 has no default window.
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Preset("gemma3"));
  gguf::GgufWriter w;
  for (const auto& [key, value] : file->metadata()) {
    if (key != "gemma3.attention.sliding_window") w.Set(key, value);
  }
  Result<ModelConfig> c = ReadModelHyperparameters(*testing::ParseWriter(w));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("gemma3.attention.sliding_window"), std::string::npos)
      << c.status().ToString();
  // An unsupported rope scaling is named.
  gguf::GgufWriter dynamic = Preset("qwen2");
  dynamic.Set("qwen2.rope.scaling.type", gguf::Value::Str("dynamic"));
  ExpectError(dynamic, "dynamic");
}

// The qwen mixtures of experts: llama.cpp's routing rules per architecture, its defaults for
// the expert widths, and clear errors for bad expert metadata or a shape-only file.
TEST(DenseConfigTest, QwenMixturesOfExperts) {
  Result<ModelConfig> q2 = ReadModelConfig(*testing::ParseWriter(Preset("qwen2moe")));
  ASSERT_TRUE(q2.ok()) << q2.status().ToString();
  ASSERT_TRUE(q2->moe.has_value());
  EXPECT_TRUE(q2->qkv_bias);
  EXPECT_EQ(q2->moe->num_experts, 8);
  EXPECT_EQ(q2->moe->top_k, 4);
  EXPECT_EQ(q2->moe->shared_ffn_dim, 128);
  EXPECT_TRUE(q2->moe->shared_gate);
  EXPECT_FALSE(q2->moe->norm_topk);
  Result<ModelConfig> q3 = ReadModelConfig(*testing::ParseWriter(Preset("qwen3moe")));
  ASSERT_TRUE(q3.ok()) << q3.status().ToString();
  ASSERT_TRUE(q3->moe.has_value());
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_EQ(q3->moe->shared_ffn_dim, 0);
  EXPECT_TRUE(q3->moe->norm_topk);  // llama.cpp's qwen3moe graph, whatever the metadata

  // Without the width keys: experts feed_forward_length / experts used, shared expert
  // feed_forward_length (llama.cpp's loaders).
  std::shared_ptr<const gguf::GgufFile> file = testing::ParseWriter(Preset("qwen2moe"));
  gguf::GgufWriter w;
  for (const auto& [key, value] : file->metadata()) {
    if (key != "qwen2moe.expert_feed_forward_length" &&
        key != "qwen2moe.expert_shared_feed_forward_length") {
      w.Set(key, value);
    }
  }
  Result<ModelConfig> defaults = ReadModelHyperparameters(*testing::ParseWriter(w));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->moe->expert_ffn_dim, 384 / 4);
  EXPECT_EQ(defaults->moe->shared_ffn_dim, 384);

  gguf::GgufWriter too_many = Preset("qwen3moe");
  too_many.Set("qwen3moe.expert_used_count", gguf::Value::U32(9));
  ExpectError(too_many, "expert_used_count 9");
  ExpectError(Without("qwen2moe", "blk.2.ffn_gate_inp_shexp.weight"),
              "blk.2.ffn_gate_inp_shexp.weight");
  ExpectError(Without("qwen3moe", "blk.1.ffn_down_exps.weight"), "blk.1.ffn_down_exps.weight");
  ExpectError(Preset("qwen3moe", "qwen3-30b-a3b"), "shape-only");
}

}  // namespace
}  // namespace kvserve::model
