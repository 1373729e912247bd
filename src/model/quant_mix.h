// llama.cpp's quantization file types (`llama-quantize ... Q4_K_M`) and the per-tensor mix
// rules behind them, so `make-model --type q4_k_m` writes the tensor types llama.cpp's quantize
// writes from the same f32 weights (src/llama-quant.cpp of the llama.cpp node-llama-cpp@3.21.1
// ships: llama_tensor_get_type, tensor_type_fallback; no imatrix, no overrides).
//
// The mixed types, by rule (n = layers; "more bits" = layer i < n/8 or i >= 7n/8 or
// (i - n/8) % 3 == 2; n_gqa = heads / kv heads):
//   output.weight (and token_embd.weight when there is no output.weight): Q6_K, or Q8_0 when
//     its row length is not a multiple of the file type's block (or the type is Q8_0)
//   attn_v / attn_qkv / attn_kv_b:  q2_k -> Q3_K (Q4_K if n_gqa >= 4); q3_k_m -> Q5_K for the
//     first two, Q4_K after; iq4_nl / iq4_xs -> Q5_K if n_gqa >= 4; q4_k_m / q5_k_m -> Q6_K on
//     "more bits" layers; q4_k_s -> Q5_K for the first four; then, in a llama 70B (80 layers,
//     GQA), Q3_K / Q4_K -> Q5_K
//   ffn_down: q2_k -> Q3_K; q3_k_m -> Q5_K if i < n/16, else Q4_K; q4_k_m / q5_k_m -> Q6_K on
//     "more bits" layers; iq4_nl / iq4_xs -> Q5_K if i < n/8; q4_k_s -> Q5_K if i < n/8
//   attn_output: q2_k -> Q3_K; q3_k_m -> Q4_K
//   everything else: the file type's base type (Q4_K for q4_k_m and q4_k_s, Q3_K for q3_k_m...)
// then, when a row length is not a multiple of the chosen type's block: Q2_K / Q3_K -> Q4_0,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, and F16 if still not a multiple.
// Only 2-D tensors named *weight (not *_norm.weight) are quantized; others keep f32.
// f32, f16, bf16, q8_0 and q4_0 are written pure (every matrix in that type), as make-model
// always has; (llama.cpp's quantize would give a Q4_0 file a Q6_K output.weight).
//
// Scope: dense models (llama.cpp's n_expert <= 1 rules), every layer holding one attn_v-like
// and one ffn_down tensor (llama.cpp counts them in layer order; here the layer index stands in).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensor/dtype.h"

namespace kvserve::model {

enum class FileType {
  kF32, kF16, kBF16, kQ8_0, kQ4_0,  // pure
  kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K_M, kQ4_K_S, kQ4_K_M, kQ5_K_M, kQ6_K, kIQ4_NL, kIQ4_XS,
  kMXFP4_MOE,  // experts (3-D *_exps tensors) MXFP4, every other matrix Q8_0
};

struct FileTypeInfo {
  FileType type;
  std::string_view name;      // make-model --type and llama-quantize's name, lower case
  uint32_t llama_ftype;       // general.file_type (llama.cpp's llama_ftype)
  tensor::DType base;         // the type of tensors no rule singles out
  bool mixed;                 // false: every matrix is `base`
};

// Every file type, in enum order.
std::span<const FileTypeInfo> FileTypes();
const FileTypeInfo& GetFileTypeInfo(FileType type);
std::optional<FileType> FileTypeFromName(std::string_view name);

// What the rules read about the model, as llama.cpp's quantize sees it.
struct QuantMixModel {
  std::string architecture;  // general.architecture
  int64_t num_layers = 0;    // <arch>.block_count
  int64_t num_heads = 1;     // <arch>.attention.head_count
  int64_t num_kv_heads = 1;  // <arch>.attention.head_count_kv
  bool has_output = true;    // the file has output.weight (else token_embd is tied to it)
};

// The type llama.cpp's quantize stores tensor `name` in (GGUF dims, ne[0] first), quantizing a
// file of f32 tensors to `type`.
tensor::DType QuantTypeFor(FileType type, const QuantMixModel& model, std::string_view name,
                           std::span<const int64_t> dims);

}  // namespace kvserve::model
