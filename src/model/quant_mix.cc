#include "model/quant_mix.h"

#include <array>
#include <charconv>

#include "core/check.h"

namespace kvserve::model {
namespace {

using tensor::DType;

constexpr std::array<FileTypeInfo, 17> kFileTypes = {{
    {FileType::kF32, "f32", 0, DType::kF32, false},
    {FileType::kF16, "f16", 1, DType::kF16, false},
    {FileType::kBF16, "bf16", 32, DType::kBF16, false},
    {FileType::kQ8_0, "q8_0", 7, DType::kQ8_0, false},
    {FileType::kQ4_0, "q4_0", 2, DType::kQ4_0, false},
    {FileType::kQ4_1, "q4_1", 3, DType::kQ4_1, true},
    {FileType::kQ5_0, "q5_0", 8, DType::kQ5_0, true},
    {FileType::kQ5_1, "q5_1", 9, DType::kQ5_1, true},
    {FileType::kQ2_K, "q2_k", 10, DType::kQ2_K, true},
    {FileType::kQ3_K_M, "q3_k_m", 12, DType::kQ3_K, true},
    {FileType::kQ4_K_S, "q4_k_s", 14, DType::kQ4_K, true},
    {FileType::kQ4_K_M, "q4_k_m", 15, DType::kQ4_K, true},
    {FileType::kQ5_K_M, "q5_k_m", 17, DType::kQ5_K, true},
    {FileType::kQ6_K, "q6_k", 18, DType::kQ6_K, true},
    {FileType::kIQ4_NL, "iq4_nl", 25, DType::kIQ4_NL, true},
    {FileType::kIQ4_XS, "iq4_xs", 30, DType::kIQ4_XS, true},
    {FileType::kMXFP4_MOE, "mxfp4_moe", 38, DType::kMXFP4, true},
}};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kFileTypes.size(); ++i) {
    if (static_cast<size_t>(kFileTypes[i].type) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kFileTypes must list FileType values in enum order");

// llama.cpp's tensor categories (tensor_get_category), as far as the rules below use them.
enum class Category { kOutput, kTokenEmbd, kAttnV, kAttnOutput, kFfnDown, kOther };

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

Category CategoryOf(std::string_view name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    return Category::kTokenEmbd;
  }
  if (Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight") ||
      Contains(name, "attn_v.weight")) {
    return Category::kAttnV;
  }
  if (Contains(name, "attn_k.weight") || Contains(name, "attn_q.weight")) return Category::kOther;
  if (Contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (Contains(name, "ffn_up") || Contains(name, "ffn_gate")) return Category::kOther;
  if (Contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// ggml_n_dims: trailing dimensions of 1 do not count.
int NumDims(std::span<const int64_t> dims) {
  int n = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] > 1) n = static_cast<int>(i) + 1;
  }
  return n;
}

// tensor_allows_quantization, for the tensors of dense models.
bool AllowsQuantization(std::string_view name, std::span<const int64_t> dims) {
  if (NumDims(dims) < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  for (std::string_view skip : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                "per_layer_model_proj", "attn_rel_b.weight", "ssm_conv1d"}) {
    if (Contains(name, skip)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

// The layer of "blk.<i>.<...>", or -1.
int LayerOf(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int layer = -1;
  const auto [end, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), layer);
  return ec == std::errc() && end < name.data() + name.size() && *end == '.' ? layer : -1;
}

bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

DType AttnVType(FileType f, DType t, int64_t i, const QuantMixModel& m) {
  const int64_t n_gqa = m.num_heads / m.num_kv_heads;
  if (f == FileType::kQ2_K) {
    t = n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
  } else if (f == FileType::kQ3_K_M) {
    t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
  } else if ((f == FileType::kIQ4_NL || f == FileType::kIQ4_XS) && n_gqa >= 4) {
    t = DType::kQ5_K;
  } else if ((f == FileType::kQ4_K_M || f == FileType::kQ5_K_M) && UseMoreBits(i, m.num_layers)) {
    t = DType::kQ6_K;
  } else if (f == FileType::kQ4_K_S && i < 4) {
    t = DType::kQ5_K;
  }
  const bool llama_70b = m.architecture == "llama" && m.num_layers == 80 && n_gqa > 1;
  if (llama_70b && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
  return t;
}

DType FfnDownType(FileType f, DType t, int64_t i, int64_t n) {
  switch (f) {
    case FileType::kQ2_K: return DType::kQ3_K;
    case FileType::kQ3_K_M: return i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
    case FileType::kQ4_K_M:
    case FileType::kQ5_K_M: return UseMoreBits(i, n) ? DType::kQ6_K : t;
    case FileType::kIQ4_NL:
    case FileType::kIQ4_XS:
    case FileType::kQ4_K_S: return i < n / 8 ? DType::kQ5_K : t;
    default: return t;
  }
}

// llama_tensor_get_type_impl for the file types above (dense, no imatrix, not falcon).
// `experts`: a stacked expert tensor (ggml's ne[2] > 1).
DType MixedType(FileType f, const QuantMixModel& m, Category category, int64_t row_len,
                int64_t layer, bool experts) {
  const DType base = GetFileTypeInfo(f).base;
  // MXFP4_MOE: the output (and a tied embedding) too is Q8_0.
  if (f == FileType::kMXFP4_MOE) return experts ? DType::kMXFP4 : DType::kQ8_0;
  if (category == Category::kOutput || (!m.has_output && category == Category::kTokenEmbd)) {
    if (row_len % tensor::BlockElems(base) != 0) return DType::kQ8_0;
    return base != DType::kQ8_0 ? DType::kQ6_K : base;
  }
  switch (category) {
    case Category::kAttnV: return AttnVType(f, base, layer, m);
    case Category::kFfnDown: return FfnDownType(f, base, layer, m.num_layers);
    case Category::kAttnOutput:
      if (f == FileType::kQ2_K) return DType::kQ3_K;
      if (f == FileType::kQ3_K_M) return DType::kQ4_K;
      return base;
    default: return base;
  }
}

// tensor_type_fallback: a type whose blocks do not tile the row gives way to a smaller one.
DType Fallback(DType t, int64_t row_len) {
  if (row_len % tensor::BlockElems(t) == 0) return t;
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K: t = DType::kQ4_0; break;
    case DType::kQ4_K: t = DType::kQ5_0; break;
    case DType::kQ5_K: t = DType::kQ5_1; break;
    case DType::kQ6_K: t = DType::kQ8_0; break;
    case DType::kIQ4_XS: t = DType::kIQ4_NL; break;
    default: break;
  }
  return row_len % tensor::BlockElems(t) == 0 ? t : DType::kF16;
}

}  // namespace

std::span<const FileTypeInfo> FileTypes() {
  return kFileTypes;
}

const FileTypeInfo& GetFileTypeInfo(FileType type) {
  const auto i = static_cast<size_t>(type);
  CHECK_LT(i, kFileTypes.size());
  return kFileTypes[i];
}

std::optional<FileType> FileTypeFromName(std::string_view name) {
  for (const FileTypeInfo& info : kFileTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

DType QuantTypeFor(FileType type, const QuantMixModel& model, std::string_view name,
                   std::span<const int64_t> dims) {
  CHECK(!dims.empty()) << name;
  if (!AllowsQuantization(name, dims)) return DType::kF32;
  const FileTypeInfo& info = GetFileTypeInfo(type);
  if (!tensor::IsIntegerQuant(info.base)) return info.base;  // f32 / f16 / bf16: no mix
  // make-model asks per expert matrix (2-D dims) of a stacked *_exps tensor.
  const bool experts = (dims.size() > 2 && dims[2] > 1) || name.ends_with("_exps.weight");
  const DType t = info.mixed
                      ? MixedType(type, model, CategoryOf(name), dims[0], LayerOf(name), experts)
                      : info.base;
  return Fallback(t, dims[0]);
}

}  // namespace kvserve::model
