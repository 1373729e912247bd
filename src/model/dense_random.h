// Random-weight GGUF files of the dense architectures (model/config.h): make-model's presets
// and the shapes tests build (model/random_weights.h has the generator, model/random_vocab.h
// the vocabularies). Each architecture's file has llama.cpp's metadata keys and tensor names,
// so llama.cpp loads it too.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/ops.h"
#include "model/moe_config.h"
#include "model/random_vocab.h"
#include "model/random_weights.h"

namespace kvserve::model {

// Llama 3.x rotary scaling (HF rope_scaling type "llama3"), written as rope_freqs.weight the way
// llama.cpp's converter computes it: per frequency pair, wavelengths above
// original_context / low_freq_factor are divided by `factor`, those below
// original_context / high_freq_factor are kept, and the band between is interpolated.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

struct DenseSpec {
  std::string arch = "llama";   // general.architecture: llama qwen2 qwen3 phi3 gemma2 gemma3
                                // qwen2moe qwen3moe gpt-oss
  std::string name = "custom";  // written as general.name "kvserve-random-<name>"
  int64_t dim = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t ffn_dim = 96;
  int64_t vocab_size = 128;
  int64_t context_length = 256;
  std::optional<int64_t> head_dim;  // attention.key_length when set (default dim/heads)
  bool tied_output = false;         // no output.weight: logits use token_embd.weight
  float rms_norm_eps = 1e-5f;
  std::optional<int64_t> rope_dim;               // written when set (readers default to head_dim)
  std::optional<double> rope_freq_base;          // written when set (readers default to 10000)
  std::optional<double> rope_linear_scale;       // rope.scaling.type "linear" when set
  std::optional<Llama3RopeScaling> llama3_rope;  // llama: rope_freqs.weight
  bool rope_factors = false;  // phi3: rope_factors_short/long.weight and their attn_factor
  std::optional<kernels::YarnParams> yarn;  // rope.scaling.type "yarn" (gpt-oss)
  std::optional<int64_t> sliding_window;  // gemma2 / gemma3 / gpt-oss attention.sliding_window
  std::optional<double> attn_softcap;     // gemma2 attn_logit_softcapping
  std::optional<double> final_softcap;    // gemma2 final_logit_softcapping
  bool fused_qkv = false;                 // phi3: attn_qkv.weight instead of q, k, v
  // Standard deviation of the token embeddings. The tied real shapes (qwen3-0.6b, gemma3-1b)
  // use 2 / sqrt(dim), so that the logits they give have standard deviation ~2.
  float embedding_std = 1.0f;
  // The vocabulary (vocab_size >= 300; a smaller model has token ids only). Default: the
  // architecture's family (llama: SentencePiece).
  std::optional<VocabFamily> vocab;
  // qwen2moe / qwen3moe: every layer's FFN is this mixture of experts (num_experts, top_k,
  // expert_ffn_dim; qwen2moe's shared_ffn_dim), written with llama.cpp's expert keys.
  std::optional<MoeConfig> moe;
  bool shape_only = false;  // metadata only, no tensors (published shapes for plan / inspect)

  int64_t HeadDim() const { return head_dim.value_or(dim / num_heads); }
  int64_t QDim() const { return HeadDim() * num_heads; }
  int64_t KvDim() const { return HeadDim() * num_kv_heads; }
  int64_t NumParams() const;
};

// The presets of `arch` (make-model --preset names), in a fixed order; empty for other names.
std::span<const std::string_view> DensePresets(std::string_view arch);
// A preset of `arch`; InvalidArgument naming the presets otherwise. Every architecture has
// "tiny" (~1M parameters, outputs that vary); the dense ones also "tiny-256" (the same 256
// wide, so K-quants apply to every matrix); llama has "110m" (llama2.c's stories110M shape),
// "llama3-tiny" (BPE vocabulary, Llama 3 rope scaling, GQA 4:1) and "llama3-tiny-256"; qwen3
// has "qwen3-0.6b" and gemma3 "gemma3-1b" (the published shapes, 151,936 and 262,144 tokens);
// qwen2moe and qwen3moe have "small" (~0.5-1B parameters, every row a multiple of 256 values,
// for speed work) and qwen3moe "qwen3-30b-a3b" (the published shape, metadata only); gpt-oss
// has "tiny", "small" and the published "gpt-oss-20b" / "gpt-oss-120b" (metadata only).
Result<DenseSpec> FindDensePreset(std::string_view arch, std::string_view preset);

// The model's metadata, weights and, when vocab_size >= 300, its family's vocabulary and chat
// template. Weights: matrices uniform with variance 1/fan_in (bound sqrt(3 / fan_in)), so
// activations keep their scale; biases uniform in [-0.1, 0.1); the output with variance 4/dim,
// so logits have standard deviation ~2 (peaked, not degenerate); embeddings with standard
// deviation embedding_std; routers (ffn_gate_inp*, kept F32 as llama.cpp's quantize does)
// with 6x the matrices' bound, so routing is decisive; biases and gpt-oss's sinks F32 (its
// published MXFP4 experts: make-model --type mxfp4_moe, llama.cpp's quantize mix). InvalidArgument for an inconsistent
// spec.
Result<gguf::GgufWriter> DenseRandomWriter(const DenseSpec& spec, const RandomWeights& weights);

}  // namespace kvserve::model
