#include "model/dense_random.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

namespace kvserve::model {
namespace {

// What each architecture's files hold besides llama's tensors (llama.cpp's tensor lists).
struct ArchTensors {
  bool qkv_bias = false;       // qwen2
  bool qk_norm = false;        // qwen3, gemma3
  bool post_norms = false;     // gemma2, gemma3
  bool fused_gate_up = false;  // phi3
  bool gpt_oss = false;        // o bias, sinks, FFN norm "post_attention_norm", MoE biases
};

ArchTensors TensorsOf(std::string_view arch) {
  ArchTensors t;
  t.gpt_oss = arch == "gpt-oss";
  t.qkv_bias = arch == "qwen2" || arch == "qwen2moe" || t.gpt_oss;
  t.qk_norm = arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3";
  t.post_norms = arch == "gemma2" || arch == "gemma3";
  t.fused_gate_up = arch == "phi3";
  return t;
}

VocabFamily DefaultVocab(std::string_view arch) {
  if (arch == "qwen2" || arch == "qwen2moe") return VocabFamily::kQwen2;
  if (arch == "gpt-oss") return VocabFamily::kGptOss;
  if (arch == "qwen3" || arch == "qwen3moe") return VocabFamily::kQwen3;
  if (arch == "phi3") return VocabFamily::kPhi3;
  if (arch == "gemma2" || arch == "gemma3") return VocabFamily::kGemma;
  return VocabFamily::kLlamaSpm;
}

// Phi-3's LongRoPE attention factor for a context extended from `original` to `context`
// (what llama.cpp's converter writes): sqrt(1 + ln(scale) / ln(original)), 1 unextended.
double Phi3AttnFactor(int64_t context, int64_t original) {
  const double scale = static_cast<double>(context) / static_cast<double>(original);
  return scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(original));
}

void SetMetadata(const DenseSpec& s, tensor::DType type, std::optional<uint32_t> file_type,
                 gguf::GgufWriter& w) {
  using gguf::Value;
  auto u32 = [](int64_t v) { return Value::U32(static_cast<uint32_t>(v)); };
  auto key = [&](std::string_view k) { return fmt::format("{}.{}", s.arch, k); };
  w.Set("general.architecture", Value::Str(s.arch));
  w.Set("general.name", Value::Str("kvserve-random-" + s.name));
  w.Set("general.file_type", Value::U32(file_type ? *file_type : LlamaFileType(type)));
  if (type != tensor::DType::kF32 && type != tensor::DType::kF16 && type != tensor::DType::kBF16) {
    w.Set("general.quantization_version", Value::U32(2));
  }
  w.Set(key("vocab_size"), u32(s.vocab_size));
  w.Set(key("context_length"), u32(s.context_length));
  w.Set(key("embedding_length"), u32(s.dim));
  w.Set(key("block_count"), u32(s.num_layers));
  w.Set(key("feed_forward_length"), u32(s.ffn_dim));
  w.Set(key("attention.head_count"), u32(s.num_heads));
  w.Set(key("attention.head_count_kv"), u32(s.num_kv_heads));
  if (s.head_dim) {
    w.Set(key("attention.key_length"), u32(*s.head_dim));
    w.Set(key("attention.value_length"), u32(*s.head_dim));
  }
  w.Set(key("attention.layer_norm_rms_epsilon"), Value::F32(s.rms_norm_eps));
  if (s.rope_freq_base)
    w.Set(key("rope.freq_base"), Value::F32(static_cast<float>(*s.rope_freq_base)));
  if (s.rope_dim) w.Set(key("rope.dimension_count"), u32(*s.rope_dim));
  if (s.rope_linear_scale) {
    w.Set(key("rope.scaling.type"), Value::Str("linear"));
    w.Set(key("rope.scaling.factor"), Value::F32(static_cast<float>(*s.rope_linear_scale)));
  }
  if (s.rope_factors) {
    const int64_t original = s.context_length / 4;
    w.Set(key("rope.scaling.original_context_length"), u32(original));
    w.Set(key("rope.scaling.attn_factor"),
          Value::F32(static_cast<float>(Phi3AttnFactor(s.context_length, original))));
  }
  if (s.yarn) {
    w.Set(key("rope.scaling.type"), Value::Str("yarn"));
    w.Set(key("rope.scaling.factor"), Value::F32(static_cast<float>(s.yarn->factor)));
    w.Set(key("rope.scaling.original_context_length"), u32(s.yarn->orig_ctx));
  }
  if (s.sliding_window) w.Set(key("attention.sliding_window"), u32(*s.sliding_window));
  if (s.attn_softcap) {
    w.Set(key("attn_logit_softcapping"), Value::F32(static_cast<float>(*s.attn_softcap)));
  }
  if (s.final_softcap) {
    w.Set(key("final_logit_softcapping"), Value::F32(static_cast<float>(*s.final_softcap)));
  }
  if (s.moe) {
    w.Set(key("expert_count"), u32(s.moe->num_experts));
    w.Set(key("expert_used_count"), u32(s.moe->top_k));
    w.Set(key("expert_feed_forward_length"), u32(s.moe->expert_ffn_dim));
    if (s.moe->shared_ffn_dim > 0) {
      w.Set(key("expert_shared_feed_forward_length"), u32(s.moe->shared_ffn_dim));
    }
  }
}

// rope_freqs.weight of Llama 3.x scaling (see Llama3RopeScaling).
std::vector<float> Llama3RopeFactors(const DenseSpec& s) {
  const Llama3RopeScaling& r = *s.llama3_rope;
  const int64_t rope_dim = s.rope_dim.value_or(s.HeadDim());
  const double base = s.rope_freq_base.value_or(10000.0);
  const double low_wavelen = static_cast<double>(r.original_context) / r.low_freq_factor;
  const double high_wavelen = static_cast<double>(r.original_context) / r.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < rope_dim; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / rope_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (r.original_context / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / r.factor + smooth)));
    }
  }
  return factors;
}

Status AddF32(gguf::GgufWriter& w, const std::string& name, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return w.AddTensor(name, {static_cast<int64_t>(values.size())}, tensor::DType::kF32,
                     std::move(bytes));
}

// The angle divisors of Phi-3's short and long rope factors: rising from 1 across the pairs,
// the long ones steeper (the shape of Phi-3.5's published factors).
Status AddRopeFactors(const DenseSpec& s, gguf::GgufWriter& w) {
  const int64_t half = s.rope_dim.value_or(s.HeadDim()) / 2;
  std::vector<float> short_factors, long_factors;
  for (int64_t i = 0; i < half; ++i) {
    const float x = static_cast<float>(i) / static_cast<float>(half);
    short_factors.push_back(1.0f + 0.5f * x * x);
    long_factors.push_back(1.0f + 8.0f * x * x);
  }
  KV_RETURN_IF_ERROR(AddF32(w, "rope_factors_long.weight", long_factors));
  return AddF32(w, "rope_factors_short.weight", short_factors);
}

float Scaled(int64_t fan_in) {
  return std::sqrt(3.0f / static_cast<float>(fan_in));
}

Status AddAttention(const DenseSpec& s, const ArchTensors& a, const std::string& p,
                    RandomTensorWriter& t) {
  KV_RETURN_IF_ERROR(t.Norm(p + "attn_norm.weight", s.dim));
  if (s.fused_qkv) {
    KV_RETURN_IF_ERROR(
        t.Matrix(p + "attn_qkv.weight", s.dim, s.QDim() + 2 * s.KvDim(), Scaled(s.dim)));
  } else {
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_q.weight", s.dim, s.QDim(), Scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_k.weight", s.dim, s.KvDim(), Scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_v.weight", s.dim, s.KvDim(), Scaled(s.dim)));
  }
  if (a.qkv_bias) {
    KV_RETURN_IF_ERROR(t.Vector(p + "attn_q.bias", s.QDim(), 0.1f));
    KV_RETURN_IF_ERROR(t.Vector(p + "attn_k.bias", s.KvDim(), 0.1f));
    KV_RETURN_IF_ERROR(t.Vector(p + "attn_v.bias", s.KvDim(), 0.1f));
  }
  if (a.qk_norm) {
    KV_RETURN_IF_ERROR(t.Norm(p + "attn_q_norm.weight", s.HeadDim()));
    KV_RETURN_IF_ERROR(t.Norm(p + "attn_k_norm.weight", s.HeadDim()));
  }
  KV_RETURN_IF_ERROR(t.Matrix(p + "attn_output.weight", s.QDim(), s.dim, Scaled(s.QDim())));
  if (a.gpt_oss) {  // sinks around the scores' scale, so that they matter
    KV_RETURN_IF_ERROR(t.Vector(p + "attn_output.bias", s.dim, 0.1f));
    KV_RETURN_IF_ERROR(t.Vector(p + "attn_sinks.weight", s.num_heads, 2.0f));
  }
  if (a.post_norms) KV_RETURN_IF_ERROR(t.Norm(p + "post_attention_norm.weight", s.dim));
  return Status::Ok();
}

// A mixture of experts (llama.cpp's names): the router (6x the usual bound, so each token's
// experts are clearly chosen), the stacked experts, and qwen2moe's gated shared expert.
Status AddMoe(const DenseSpec& s, const std::string& p, RandomTensorWriter& t) {
  const MoeConfig& m = *s.moe;
  const int64_t e = m.num_experts, f = m.expert_ffn_dim;
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate_inp.weight", s.dim, e, 6 * Scaled(s.dim)));
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_gate_exps.weight", s.dim, f, e, Scaled(s.dim)));
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_up_exps.weight", s.dim, f, e, Scaled(s.dim)));
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_down_exps.weight", f, s.dim, e, Scaled(f)));
  if (m.biases) {  // gpt-oss: (E) and (E, n) F32 arrays (DenseRandomWriter keeps *.bias F32)
    KV_RETURN_IF_ERROR(t.Vector(p + "ffn_gate_inp.bias", e, 0.5f));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate_exps.bias", f, e, 0.1f));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up_exps.bias", f, e, 0.1f));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_down_exps.bias", s.dim, e, 0.1f));
  }
  if (m.shared_ffn_dim == 0) return Status::Ok();
  const int64_t sf = m.shared_ffn_dim;
  KV_RETURN_IF_ERROR(t.Vector(p + "ffn_gate_inp_shexp.weight", s.dim, Scaled(s.dim)));
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate_shexp.weight", s.dim, sf, Scaled(s.dim)));
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up_shexp.weight", s.dim, sf, Scaled(s.dim)));
  return t.Matrix(p + "ffn_down_shexp.weight", sf, s.dim, Scaled(sf));
}

Status AddFfn(const DenseSpec& s, const ArchTensors& a, const std::string& p,
              RandomTensorWriter& t) {
  KV_RETURN_IF_ERROR(
      t.Norm(p + (a.gpt_oss ? "post_attention_norm" : "ffn_norm") + ".weight", s.dim));
  if (s.moe) return AddMoe(s, p, t);
  if (a.fused_gate_up) {
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up.weight", s.dim, 2 * s.ffn_dim, Scaled(s.dim)));
  } else {
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim, Scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up.weight", s.dim, s.ffn_dim, Scaled(s.dim)));
  }
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_down.weight", s.ffn_dim, s.dim, Scaled(s.ffn_dim)));
  if (a.post_norms) KV_RETURN_IF_ERROR(t.Norm(p + "post_ffw_norm.weight", s.dim));
  return Status::Ok();
}

Status AddWeights(const DenseSpec& s, RandomTensorWriter& t) {
  const ArchTensors a = TensorsOf(s.arch);
  KV_RETURN_IF_ERROR(
      t.Matrix("token_embd.weight", s.dim, s.vocab_size, std::sqrt(3.0f) * s.embedding_std));
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(AddAttention(s, a, p, t));
    KV_RETURN_IF_ERROR(AddFfn(s, a, p, t));
  }
  KV_RETURN_IF_ERROR(t.Norm("output_norm.weight", s.dim));
  if (s.tied_output) return Status::Ok();
  return t.Matrix("output.weight", s.dim, s.vocab_size, 2.0f * Scaled(s.dim));
}

// ---- presets ----

constexpr std::array<std::string_view, 5> kLlamaPresets = {"tiny", "tiny-256", "110m",
                                                           "llama3-tiny", "llama3-tiny-256"};
constexpr std::array<std::string_view, 2> kTinyOnly = {"tiny", "tiny-256"};
constexpr std::array<std::string_view, 3> kQwen3Presets = {"tiny", "tiny-256", "qwen3-0.6b"};
constexpr std::array<std::string_view, 3> kGemma3Presets = {"tiny", "tiny-256", "gemma3-1b"};
constexpr std::array<std::string_view, 2> kQwen2MoePresets = {"tiny", "small"};
constexpr std::array<std::string_view, 3> kQwen3MoePresets = {"tiny", "small", "qwen3-30b-a3b"};
constexpr std::array<std::string_view, 4> kGptOssPresets = {"tiny", "small", "gpt-oss-20b",
                                                            "gpt-oss-120b"};
constexpr std::string_view kWideSuffix = "-256";

// The shape fields of a spec; head_dim 0 = dim / heads (no attention.key_length written).
DenseSpec Shape(std::string_view arch, std::string_view name, int64_t dim, int64_t layers,
                int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab, int64_t context,
                int64_t head_dim = 0) {
  DenseSpec s;
  s.arch = std::string(arch);
  s.name = std::string(name);
  s.dim = dim;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.ffn_dim = ffn;
  s.vocab_size = vocab;
  s.context_length = context;
  if (head_dim > 0) s.head_dim = head_dim;
  return s;
}

// Gemma scales its embeddings by sqrt(dim): these give the residual stream RMS 1, and, tied,
// logits of standard deviation ~1 in which the input token's own is only ~sqrt(dim) / 3 higher.
float GemmaEmbeddingStd(int64_t dim) {
  return 1.0f / std::sqrt(static_cast<float>(dim));
}

// A tied real shape: embeddings scaled so the logits have standard deviation ~2. (The tiny
// presets of llama and qwen are untied: with such embeddings a tied random model mostly
// predicts its input token again.)
void Tie(DenseSpec& s) {
  s.tied_output = true;
  s.embedding_std = 2.0f / std::sqrt(static_cast<float>(s.dim));
}

std::optional<DenseSpec> LlamaPreset(std::string_view preset) {
  DenseSpec s;
  if (preset == "tiny") {
    s = Shape("llama", "tiny", 128, 4, 4, 2, 384, 512, 2048);
  } else if (preset == "110m") {
    s = Shape("llama", "110m", 768, 12, 12, 12, 2048, 32000, 32768);
    s.tied_output = true;
  } else if (preset == "llama3-tiny") {
    s = Shape("llama", "llama3-tiny", 128, 4, 8, 2, 384, 1024, 2048);
    s.rope_freq_base = 500000.0;
    s.llama3_rope = Llama3RopeScaling{8.0, 1.0, 4.0, 256};
    s.vocab = VocabFamily::kLlama3;
    s.rope_dim = s.HeadDim();
    return s;
  } else {
    return std::nullopt;
  }
  s.rope_freq_base = 10000.0;
  s.rope_dim = s.HeadDim();
  return s;
}

MoeConfig Experts(int64_t experts, int64_t top_k, int64_t expert_ffn, int64_t shared_ffn = 0) {
  MoeConfig m;
  m.num_experts = experts;
  m.top_k = top_k;
  m.expert_ffn_dim = expert_ffn;
  m.shared_ffn_dim = shared_ffn;
  m.shared_gate = shared_ffn > 0;
  return m;
}

// Qwen2-MoE (Qwen1.5-MoE-A2.7B's layout: MHA with q/k/v biases, top-4 routing plus a gated
// shared expert) and Qwen3-MoE (Qwen3-30B-A3B's: GQA with q/k norms, top-8 of 128 experts).
std::optional<DenseSpec> MoePreset(std::string_view arch, std::string_view preset) {
  DenseSpec s;
  if (arch == "qwen2moe" && preset == "tiny") {
    s = Shape("qwen2moe", "tiny", 128, 4, 8, 2, 384, 1024, 2048);
    s.moe = Experts(8, 4, 64, 128);
  } else if (arch == "qwen2moe" && preset == "small") {
    s = Shape("qwen2moe", "small", 1024, 12, 16, 16, 1024, 32000, 8192);
    s.moe = Experts(32, 4, 512, 1024);
  } else if (arch == "qwen3moe" && preset == "tiny") {
    s = Shape("qwen3moe", "tiny", 128, 4, 4, 2, 384, 1024, 2048, 48);
    s.moe = Experts(8, 2, 64);
  } else if (arch == "qwen3moe" && preset == "small") {
    s = Shape("qwen3moe", "small", 1024, 12, 8, 4, 3072, 32000, 8192, 128);
    s.moe = Experts(64, 8, 256);
  } else if (arch == "qwen3moe" && preset == "qwen3-30b-a3b") {
    // config.json: hidden 2048, 48 layers, 32 heads, 4 KV heads, head_dim 128, intermediate
    // 6144, moe_intermediate 768, 128 experts, 8 per token, 151,936 tokens, 40,960 positions.
    s = Shape("qwen3moe", "qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 151936, 40960, 128);
    s.moe = Experts(128, 8, 768);
    s.shape_only = true;
  } else {
    return std::nullopt;
  }
  s.rope_freq_base = 1000000.0;
  s.rms_norm_eps = 1e-6f;
  return s;
}

// gpt-oss (config.json of gpt-oss-20b: hidden 2880, 24 layers, 64 heads of 64, 8 KV heads,
// 32 experts of 2880, 4 per token, 201,088 tokens, 131,072 positions from 4,096 by YaRN 32,
// rope theta 150,000, 128-token windows on even layers; gpt-oss-120b: 36 layers, 128 experts).
// tiny: 16-token windows so that short prompts slide; small: rows of whole 256-value blocks.
std::optional<DenseSpec> GptOssPreset(std::string_view preset) {
  DenseSpec s;
  if (preset == "tiny") {
    s = Shape("gpt-oss", "tiny", 128, 4, 8, 2, 128, 1024, 4096, 32);
    s.moe = Experts(8, 4, 64);
    s.yarn = kernels::YarnParams{32.0, 128};
    s.sliding_window = 16;
  } else if (preset == "small") {
    s = Shape("gpt-oss", "small", 1024, 12, 16, 4, 512, 32000, 8192, 64);
    s.moe = Experts(32, 4, 512);
    s.yarn = kernels::YarnParams{32.0, 256};
    s.sliding_window = 128;
  } else if (preset == "gpt-oss-20b" || preset == "gpt-oss-120b") {
    const bool big = preset == "gpt-oss-120b";
    s = Shape("gpt-oss", preset, 2880, big ? 36 : 24, 64, 8, 2880, 201088, 131072, 64);
    s.moe = Experts(big ? 128 : 32, 4, 2880);
    s.yarn = kernels::YarnParams{32.0, 4096};
    s.sliding_window = 128;
    s.shape_only = true;
  } else {
    return std::nullopt;
  }
  s.moe->biases = true;
  s.rope_freq_base = 150000.0;
  return s;
}

std::optional<DenseSpec> OtherPreset(std::string_view arch, std::string_view preset) {
  if (arch == "qwen2moe" || arch == "qwen3moe") return MoePreset(arch, preset);
  if (arch == "gpt-oss") return GptOssPreset(preset);
  DenseSpec s;
  s.arch = std::string(arch);
  s.name = std::string(preset);
  if (arch == "qwen2" && preset == "tiny") {
    s = Shape("qwen2", "tiny", 128, 4, 8, 2, 384, 1024, 2048);
    s.rope_freq_base = 1000000.0;
    s.rms_norm_eps = 1e-6f;
  } else if (arch == "qwen3" && preset == "tiny") {
    s = Shape("qwen3", "tiny", 128, 4, 4, 2, 384, 1024, 2048, 48);
    s.rope_freq_base = 1000000.0;
    s.rms_norm_eps = 1e-6f;
  } else if (arch == "qwen3" && preset == "qwen3-0.6b") {
    s = Shape("qwen3", "qwen3-0.6b", 1024, 28, 16, 8, 3072, 151936, 40960, 128);
    s.rope_freq_base = 1000000.0;
    s.rms_norm_eps = 1e-6f;
    Tie(s);
  } else if (arch == "phi3" && preset == "tiny") {
    s = Shape("phi3", "tiny", 128, 4, 4, 4, 256, 1024, 4096);
    s.rope_dim = 24;
    s.rope_factors = true;
    s.fused_qkv = true;
  } else if (arch == "gemma2" && preset == "tiny") {
    s = Shape("gemma2", "tiny", 128, 4, 4, 2, 384, 1024, 2048, 32);
    s.sliding_window = 16;
    s.attn_softcap = 4.0;
    s.final_softcap = 8.0;
    s.rms_norm_eps = 1e-6f;
    s.tied_output = true;  // llama.cpp's gemma2 has no output.weight
    s.embedding_std = GemmaEmbeddingStd(s.dim);
  } else if (arch == "gemma3" && preset == "tiny") {
    s = Shape("gemma3", "tiny", 128, 8, 4, 1, 384, 1024, 2048, 64);
    s.sliding_window = 16;
    s.rope_freq_base = 1000000.0;
    s.rope_linear_scale = 8.0;  // global layers only (Gemma 3 4B and up)
    s.rms_norm_eps = 1e-6f;
    s.tied_output = true;
    s.embedding_std = GemmaEmbeddingStd(s.dim);
  } else if (arch == "gemma3" && preset == "gemma3-1b") {
    s = Shape("gemma3", "gemma3-1b", 1152, 26, 4, 1, 6912, 262144, 32768, 256);
    s.sliding_window = 512;
    s.rope_freq_base = 1000000.0;
    s.rms_norm_eps = 1e-6f;
    s.tied_output = true;
    s.embedding_std = GemmaEmbeddingStd(s.dim);
  } else {
    return std::nullopt;
  }
  return s;
}

// "<tiny preset>-256": the same model 256 wide (dim 256, FFN 512, heads of 256 / heads when the
// preset sets a head size, the rotary share of a head kept), so every matrix row holds whole
// 256-value blocks and the K-quant types apply where the tiny presets' 128-value rows send them
// to llama.cpp's fallbacks (model/quant_mix.h).
std::optional<DenseSpec> Wide(std::optional<DenseSpec> s, std::string_view name) {
  if (!s) return s;
  const int64_t old_head_dim = s->HeadDim();
  s->name = std::string(name);
  s->dim = 256;
  s->ffn_dim = 512;
  if (s->head_dim) s->head_dim = s->dim / s->num_heads;
  if (s->rope_dim) s->rope_dim = *s->rope_dim * s->HeadDim() / old_head_dim;
  if (s->arch == "gemma2" || s->arch == "gemma3") s->embedding_std = GemmaEmbeddingStd(s->dim);
  return s;
}

}  // namespace

int64_t DenseSpec::NumParams() const {
  const int64_t attention = 2 * dim * QDim() + 2 * dim * KvDim();
  const int64_t ffn =
      moe ? dim * moe->num_experts +
                3 * dim * (moe->num_experts * moe->expert_ffn_dim + moe->shared_ffn_dim)
          : 3 * dim * ffn_dim;
  const int64_t per_layer = 2 * dim + attention + ffn;
  return (tied_output ? 1 : 2) * vocab_size * dim + dim + num_layers * per_layer;
}

std::span<const std::string_view> DensePresets(std::string_view arch) {
  if (arch == "llama") return kLlamaPresets;
  if (arch == "qwen3") return kQwen3Presets;
  if (arch == "gemma3") return kGemma3Presets;
  if (arch == "qwen2" || arch == "phi3" || arch == "gemma2") return kTinyOnly;
  if (arch == "qwen2moe") return kQwen2MoePresets;
  if (arch == "qwen3moe") return kQwen3MoePresets;
  if (arch == "gpt-oss") return kGptOssPresets;
  return {};
}

Result<DenseSpec> FindDensePreset(std::string_view arch, std::string_view preset) {
  auto find = [arch](std::string_view name) {
    return arch == "llama" ? LlamaPreset(name) : OtherPreset(arch, name);
  };
  std::optional<DenseSpec> spec = find(preset);
  const std::span<const std::string_view> presets = DensePresets(arch);
  const bool listed = std::find(presets.begin(), presets.end(), preset) != presets.end();
  if (!spec && listed && preset.ends_with(kWideSuffix)) {
    const std::string_view base = preset.substr(0, preset.size() - kWideSuffix.size());
    if (base == "tiny" || base == "llama3-tiny") spec = Wide(find(base), preset);
  }
  if (!spec) {
    return InvalidArgument(fmt::format("unknown {} preset '{}' ({})", arch, preset,
                                       fmt::join(DensePresets(arch), ", ")));
  }
  return *spec;
}

Result<gguf::GgufWriter> DenseRandomWriter(const DenseSpec& spec, const RandomWeights& weights) {
  if (spec.num_heads <= 0 || spec.num_kv_heads <= 0 || spec.num_heads % spec.num_kv_heads != 0 ||
      (!spec.head_dim && spec.dim % spec.num_heads != 0)) {
    return InvalidArgument("dense spec: heads must divide dim and kv heads must divide heads");
  }
  if (spec.arch == "gemma3" && !spec.sliding_window) {
    return InvalidArgument("a gemma3 spec needs a sliding window");
  }
  if (spec.moe && (spec.moe->top_k < 1 || spec.moe->top_k > spec.moe->num_experts)) {
    return InvalidArgument("dense spec: experts used must be in [1, experts]");
  }
  const bool gpt_oss = spec.arch == "gpt-oss";
  if (gpt_oss && (!spec.moe || !spec.sliding_window)) {
    return InvalidArgument("a gpt-oss spec needs experts and a sliding window");
  }
  gguf::GgufWriter w;
  SetMetadata(spec, weights.TypeOf("blk.0.attn_q.weight", spec.dim, spec.QDim()), weights.file_type,
              w);
  if (spec.shape_only) return w;
  if (spec.vocab_size >= 300) {
    KV_RETURN_IF_ERROR(
        SetRandomVocab(spec.vocab.value_or(DefaultVocab(spec.arch)), spec.vocab_size, w));
  } else if (spec.vocab_size >= 260 && spec.arch == "llama") {
    SetSpmTokenizer(spec.vocab_size, w);
  }
  if (spec.llama3_rope) KV_RETURN_IF_ERROR(AddF32(w, "rope_freqs.weight", Llama3RopeFactors(spec)));
  if (spec.rope_factors) KV_RETURN_IF_ERROR(AddRopeFactors(spec, w));
  // Routers stay F32, as llama.cpp's quantize leaves ffn_gate_inp (and 1-D tensors) unquantized.
  RandomWeights typed = weights;
  typed.type_of = [&weights](std::string_view name, int64_t row_len, int64_t rows) {
    if (name.find("ffn_gate_inp") != std::string_view::npos || name.ends_with(".bias")) {
      return tensor::DType::kF32;  // (gpt-oss's biases: 2-D F32 arrays)
    }
    return weights.TypeOf(name, row_len, rows);
  };
  RandomTensorWriter tensors(w, typed);
  KV_RETURN_IF_ERROR(AddWeights(spec, tensors));
  return w;
}

}  // namespace kvserve::model
