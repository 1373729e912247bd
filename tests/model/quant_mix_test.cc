// model/quant_mix.h: llama.cpp's per-tensor quantization mixes. Rule tables for a Llama 3 8B
// shape, the block-size fallbacks, tied embeddings, and a differential test against llama.cpp's
// own llama_model_quantize (libllama of node-llama-cpp@3.21.1 in tests/compat/node, loaded with
// dlopen; skipped when absent): the same f32 weights quantized by llama.cpp and written by
// kvserve's random-weights writer with QuantTypeFor give the same tensor types and bytes.
#include "model/quant_mix.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/dense_random.h"

namespace kvserve::model {
namespace {

using tensor::DType;

DType TypeOf(FileType f, const QuantMixModel& m, const std::string& name, int64_t row_len,
             int64_t rows) {
  const int64_t dims[2] = {row_len, rows};
  return QuantTypeFor(f, m, name, dims);
}

std::string Name(DType t) {
  return std::string(tensor::DTypeName(t));
}

// Llama 3 8B: 32 layers, 32 heads, 8 KV heads (n_gqa 4), dim 4096, FFN 14336, untied output.
QuantMixModel Llama3() {
  return {"llama", 32, 32, 8, true};
}

TEST(QuantMix, Q4KMOnLlama3) {
  const QuantMixModel m = Llama3();
  const FileType f = FileType::kQ4_K_M;
  EXPECT_EQ(Name(TypeOf(f, m, "output.weight", 4096, 128256)), "q6_k");
  EXPECT_EQ(Name(TypeOf(f, m, "token_embd.weight", 4096, 128256)), "q4_k");
  // "more bits": layers < 4, >= 28, and (i - 4) % 3 == 2: 6, 9, ..., 27.
  for (int i : {0, 3, 6, 9, 27, 28, 31}) {
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(Name(TypeOf(f, m, p + "attn_v.weight", 4096, 1024)), "q6_k") << i;
    EXPECT_EQ(Name(TypeOf(f, m, p + "ffn_down.weight", 14336, 4096)), "q6_k") << i;
  }
  for (int i : {4, 5, 7, 8, 26}) {
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(Name(TypeOf(f, m, p + "attn_v.weight", 4096, 1024)), "q4_k") << i;
    EXPECT_EQ(Name(TypeOf(f, m, p + "ffn_down.weight", 14336, 4096)), "q4_k") << i;
  }
  EXPECT_EQ(Name(TypeOf(f, m, "blk.5.attn_q.weight", 4096, 4096)), "q4_k");
  EXPECT_EQ(Name(TypeOf(f, m, "blk.5.ffn_gate.weight", 4096, 14336)), "q4_k");
  EXPECT_EQ(TypeOf(f, m, "blk.5.attn_norm.weight", 4096, 1), DType::kF32);
}

TEST(QuantMix, OtherMixesOnLlama3) {
  const QuantMixModel m = Llama3();
  struct Case {
    FileType f;
    std::string tensor;
    int64_t row_len, rows;
    std::string want;
  };
  const Case cases[] = {
      {FileType::kQ2_K, "blk.7.attn_v.weight", 4096, 1024, "q4_k"},  // n_gqa >= 4
      {FileType::kQ2_K, "blk.7.ffn_down.weight", 14336, 4096, "q3_k"},
      {FileType::kQ2_K, "blk.7.attn_output.weight", 4096, 4096, "q3_k"},
      {FileType::kQ2_K, "blk.7.ffn_up.weight", 4096, 14336, "q2_k"},
      {FileType::kQ3_K_M, "blk.1.attn_v.weight", 4096, 1024, "q5_k"},
      {FileType::kQ3_K_M, "blk.2.attn_v.weight", 4096, 1024, "q4_k"},
      {FileType::kQ3_K_M, "blk.1.ffn_down.weight", 14336, 4096, "q5_k"},  // i < 32 / 16
      {FileType::kQ3_K_M, "blk.2.ffn_down.weight", 14336, 4096, "q4_k"},
      {FileType::kQ3_K_M, "blk.2.attn_output.weight", 4096, 4096, "q4_k"},
      {FileType::kQ3_K_M, "blk.2.attn_q.weight", 4096, 4096, "q3_k"},
      {FileType::kQ4_K_S, "blk.3.attn_v.weight", 4096, 1024, "q5_k"},
      {FileType::kQ4_K_S, "blk.4.attn_v.weight", 4096, 1024, "q4_k"},
      {FileType::kQ4_K_S, "blk.3.ffn_down.weight", 14336, 4096, "q5_k"},  // i < 32 / 8
      {FileType::kQ4_K_S, "blk.4.ffn_down.weight", 14336, 4096, "q4_k"},
      {FileType::kQ5_K_M, "blk.0.attn_v.weight", 4096, 1024, "q6_k"},
      {FileType::kQ5_K_M, "blk.4.attn_v.weight", 4096, 1024, "q5_k"},
      {FileType::kQ6_K, "blk.4.attn_v.weight", 4096, 1024, "q6_k"},
      {FileType::kQ6_K, "output.weight", 4096, 128256, "q6_k"},
      {FileType::kIQ4_XS, "blk.9.attn_v.weight", 4096, 1024, "q5_k"},
      {FileType::kIQ4_XS, "blk.3.ffn_down.weight", 14336, 4096, "q5_k"},
      {FileType::kIQ4_XS, "blk.4.ffn_down.weight", 14336, 4096, "iq4_xs"},
      {FileType::kIQ4_NL, "blk.4.ffn_down.weight", 14336, 4096, "iq4_nl"},
      {FileType::kQ4_1, "output.weight", 4096, 128256, "q6_k"},
      {FileType::kQ4_1, "blk.0.ffn_down.weight", 14336, 4096, "q4_1"},
      {FileType::kQ5_0, "token_embd.weight", 4096, 128256, "q5_0"},
      {FileType::kQ4_0, "output.weight", 4096, 128256, "q4_0"},  // pure
      {FileType::kQ8_0, "output.weight", 4096, 128256, "q8_0"},
      {FileType::kF16, "blk.0.attn_q.weight", 4096, 4096, "f16"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Name(TypeOf(c.f, m, c.tensor, c.row_len, c.rows)), c.want)
        << GetFileTypeInfo(c.f).name << " " << c.tensor;
  }
}

// Rows that are not whole 256-value blocks fall back (llama.cpp's tensor_type_fallback); tied
// embeddings take the output's rule; a llama 70B bumps attn_v to Q5_K.
TEST(QuantMix, FallbacksTiedEmbeddingsAnd70B) {
  const QuantMixModel tiny{"llama", 4, 4, 2, false};  // make-model's tiny preset, tied
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_M, tiny, "token_embd.weight", 128, 512)), "q8_0");
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_M, tiny, "blk.1.attn_q.weight", 128, 128)), "q5_0");
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_M, tiny, "blk.0.attn_v.weight", 128, 64)), "q5_0");
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_M, tiny, "blk.3.attn_v.weight", 128, 64)), "q8_0");
  EXPECT_EQ(Name(TypeOf(FileType::kQ5_K_M, tiny, "blk.1.attn_q.weight", 128, 128)), "q5_1");
  EXPECT_EQ(Name(TypeOf(FileType::kQ2_K, tiny, "blk.1.attn_q.weight", 128, 128)), "q4_0");
  EXPECT_EQ(Name(TypeOf(FileType::kIQ4_XS, tiny, "blk.1.attn_q.weight", 128, 128)), "iq4_nl");
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_1, tiny, "blk.1.attn_q.weight", 48, 128)), "f16");
  const QuantMixModel tied{"llama", 12, 12, 12, false};  // the 110m preset
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_M, tied, "token_embd.weight", 768, 32000)), "q6_k");
  EXPECT_EQ(Name(TypeOf(FileType::kQ8_0, tied, "token_embd.weight", 768, 32000)), "q8_0");
  const QuantMixModel llama70b{"llama", 80, 64, 8, true};
  EXPECT_EQ(Name(TypeOf(FileType::kQ4_K_S, llama70b, "blk.10.attn_v.weight", 8192, 1024)), "q5_k");
  EXPECT_EQ(Name(TypeOf(FileType::kQ2_K, llama70b, "blk.10.attn_v.weight", 8192, 1024)), "q5_k");
}

TEST(QuantMix, NamesAndFileTypes) {
  for (const FileTypeInfo& t : FileTypes()) EXPECT_EQ(FileTypeFromName(t.name), t.type);
  EXPECT_EQ(GetFileTypeInfo(FileType::kQ4_K_M).llama_ftype, 15u);
  EXPECT_EQ(GetFileTypeInfo(FileType::kIQ4_XS).llama_ftype, 30u);
  EXPECT_EQ(FileTypeFromName("Q4_K_M"), std::nullopt);
}

// ---- against llama.cpp's llama_model_quantize ----

// llama_model_quantize_params of the llama.cpp node-llama-cpp@3.21.1 ships (include/llama.h).
struct LlamaQuantizeParams {
  int32_t nthread;
  int32_t ftype;
  int32_t output_tensor_type;
  int32_t token_embedding_type;
  bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
  const void* imatrix;
  const void* kv_overrides;
  const void* tt_overrides;
  const int32_t* prune_layers;
  size_t max_buf_size;
};

std::string LibllamaPath() {
  if (const char* env = std::getenv("KVSERVE_LIBLLAMA")) return env;
  return std::string(KVSERVE_SOURCE_DIR) +
         "/tests/compat/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
         "libllama.v0.4.0.so";
}

// A small llama with whole 256-value rows, GQA 4 and 8 layers, so the rules differ by layer.
DenseSpec MixSpec() {
  DenseSpec s;
  s.name = "mix-test";
  s.dim = 256;
  s.num_layers = 8;
  s.num_heads = 4;
  s.num_kv_heads = 1;
  s.ffn_dim = 256;
  s.vocab_size = 320;
  s.rope_freq_base = 10000.0;
  s.rope_dim = s.HeadDim();
  return s;
}

std::string TypeName(const gguf::TensorInfo& t) {
  return t.dtype ? Name(*t.dtype) : "ggml type " + std::to_string(t.ggml_type);
}

// llama.cpp's libllama, loaded once for the suite (nullptr, and the tests skip, when absent).
class LlamaCppQuantize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(LibllamaPath())) return;
    lib_ = dlopen(LibllamaPath().c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    defaults_ = reinterpret_cast<LlamaQuantizeParams (*)()>(
        dlsym(lib_, "llama_model_quantize_default_params"));
    quantize_ =
        reinterpret_cast<uint32_t (*)(const char*, const char*, const LlamaQuantizeParams*)>(
            dlsym(lib_, "llama_model_quantize"));
    ASSERT_TRUE(defaults_ != nullptr && quantize_ != nullptr);
  }
  static void TearDownTestSuite() {
    if (lib_ != nullptr) dlclose(lib_);
    lib_ = nullptr;
  }
  void SetUp() override {
    if (lib_ == nullptr) {
      GTEST_SKIP() << "llama.cpp's libllama not found at " << LibllamaPath()
                   << " (scripts/test.sh installs node-llama-cpp@3.21.1 into tests/compat/node)";
    }
  }

  // For every mixed file type: llama.cpp quantizes the f32 file of `spec`; kvserve writes the
  // same weights with QuantTypeFor (as make-model does); both files must hold the same tensor
  // types and bytes.
  // `only`: that file type alone (else every mixed one).
  void ExpectSameFiles(const DenseSpec& spec, std::optional<FileType> only = std::nullopt) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() /
        ("kvserve_quant_mix_" + std::to_string(getpid()) + "_" + spec.arch + "_" + spec.name);
    std::filesystem::create_directories(dir);
    RandomWeights f32;
    f32.seed = 7;
    const std::string f32_path = (dir / "f32.gguf").string();
    ASSERT_TRUE(DenseRandomWriter(spec, f32)->Write(f32_path).ok());
    const QuantMixModel mix{spec.arch, spec.num_layers, spec.num_heads, spec.num_kv_heads,
                            !spec.tied_output};
    for (const FileTypeInfo& type : FileTypes()) {
      if (!type.mixed || (only && type.type != *only)) continue;
      SCOPED_TRACE(spec.arch + " " + spec.name + " " + std::string(type.name));
      const std::string theirs = (dir / (std::string(type.name) + ".llama.gguf")).string();
      LlamaQuantizeParams params = defaults_();
      params.ftype = static_cast<int32_t>(type.llama_ftype);
      params.nthread = 2;
      ASSERT_EQ(quantize_(f32_path.c_str(), theirs.c_str(), &params), 0u);

      RandomWeights weights;
      weights.seed = 7;
      weights.file_type = type.llama_ftype;
      weights.type_of = [&](std::string_view name, int64_t row_len, int64_t rows) {
        const int64_t dims[2] = {row_len, rows};
        return QuantTypeFor(type.type, mix, name, dims);
      };
      Result<gguf::GgufWriter> ours_writer = DenseRandomWriter(spec, weights);
      ASSERT_TRUE(ours_writer.ok());
      auto ours = gguf::GgufFile::FromBuffer(ours_writer->Serialize());
      auto llama = gguf::GgufFile::Open(theirs);
      ASSERT_TRUE(ours.ok() && llama.ok());
      EXPECT_EQ((*ours)->GetInt("general.file_type").value(),
                (*llama)->GetInt("general.file_type").value());
      ASSERT_EQ((*ours)->tensors().size(), (*llama)->tensors().size());
      for (const gguf::TensorInfo& t : (*llama)->tensors()) {
        const gguf::TensorInfo* mine = (*ours)->FindTensor(t.name);
        ASSERT_NE(mine, nullptr) << t.name;
        EXPECT_EQ(TypeName(*mine), TypeName(t)) << t.name;
        if (mine->ggml_type != t.ggml_type) continue;
        ASSERT_EQ(mine->size_bytes, t.size_bytes) << t.name;
        EXPECT_EQ(std::memcmp(mine->data, t.data, t.size_bytes), 0) << t.name << " bytes differ";
      }
    }
    std::filesystem::remove_all(dir);
  }

  static inline void* lib_ = nullptr;
  static inline LlamaQuantizeParams (*defaults_)() = nullptr;
  static inline uint32_t (*quantize_)(const char*, const char*,
                                      const LlamaQuantizeParams*) = nullptr;
};

TEST_F(LlamaCppQuantize, Llama) {
  ExpectSameFiles(MixSpec());
}

// Architectures with rules of their own, on make-model's 256-wide presets (K-quants on every
// matrix): phi3's fused attn_qkv (counted and typed as attn_v) and double-height ffn_up, at
// GQA 1; gemma3's tied token_embd (typed as the output), q/k norms and 8 layers at GQA 4.
TEST_F(LlamaCppQuantize, Phi3FusedQkv) {
  ExpectSameFiles(*FindDensePreset("phi3", "tiny-256"));
}

TEST_F(LlamaCppQuantize, Gemma3TiedEmbeddingGqa4) {
  ExpectSameFiles(*FindDensePreset("gemma3", "tiny-256"));
}

// gpt-oss's published mix (MXFP4_MOE): the stacked experts MXFP4, every other matrix Q8_0
// (its 2-D expert bias arrays stay F32), on the tiny preset.
TEST_F(LlamaCppQuantize, GptOssMxfp4Moe) {
  ExpectSameFiles(*FindDensePreset("gpt-oss", "tiny"), FileType::kMXFP4_MOE);
}

// The other dense presets (qwen2's biases, qwen3 at GQA 2, gemma2, llama3's rope_freqs): same
// rules as above, so not run by default (~30 s); run with --gtest_also_run_disabled_tests.
TEST_F(LlamaCppQuantize, DISABLED_OtherDensePresets) {
  for (const auto& [arch, preset] : {std::pair{"qwen2", "tiny-256"},
                                     {"qwen3", "tiny-256"},
                                     {"gemma2", "tiny-256"},
                                     {"llama", "llama3-tiny-256"}}) {
    ExpectSameFiles(*FindDensePreset(arch, preset));
  }
}

}  // namespace
}  // namespace kvserve::model
