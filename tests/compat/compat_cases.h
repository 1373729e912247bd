// What the compat suite compares against llama.cpp: one line per model file and per
// vocabulary. A new architecture or weight type is one more line here (its bound measured and
// recorded in docs/models.md).
#pragma once

namespace kvserve::compat {

// A model whose next-token distributions kvserve and llama.cpp must agree on.
struct ModelCase {
  const char* name;  // test name: letters, digits and '_'
  // "make-model ARGS" (kvserve make-model ARGS -o FILE, in a temp dir) or "shared:PATH" (a
  // file under ../shared; the test skips when it is absent).
  const char* source;
  // KV storage on both sides: "f32" for F32 weights (kvserve's auto; llama.cpp set to F32),
  // else "f16" (both defaults).
  const char* kv_dtype;
  double bound;  // max |logprob difference| over each side's top-5, at every position
  // Extra `kvserve generate` flags: phi3 runs with --max-model-len at its original context, so
  // that both sides use the short rope factors (llama.cpp picks them by its context size).
  const char* generate_flags = "";
  // Mixtures of experts: at most this many positions may exceed the bound (and are left out
  // of both checks, counted in the table's note). Where the two sides' roundings reorder two
  // experts' router scores, that token runs other experts and its logprobs move by far more
  // than the rounding; everywhere else the bound holds as for a dense model.
  int routing_flips = 0;
  // llama.cpp loads a copy of the file with every BF16 tensor widened to F32 (exactly, by
  // WidenBf16 in compat_test.cc) while kvserve runs the BF16 file itself: the two compute the
  // same weights, each in f32, which isolates how kvserve computes BF16 weights from how
  // llama.cpp's own BF16 path rounds (docs/models.md).
  bool anchor_widened = false;
};

// F16 weights: 2e-3 (issue 14) held on the Intel Xeon (max 1.2-1.9e-3), but on an AMD Zen 5
// llama.cpp's own F16 result moves by 3.6e-3 between one batch and one token at a time
// (tests/compat/node/batching.mjs; 2.2e-6 on the Xeon), so no fixed computation stays within
// 2e-3 of both of its paths there; kvserve (exact f32 activations) lands 2.9-3.9e-3 from either.
// 5e-3 covers both machines; docs/models.md has the numbers.
inline constexpr double kF16Bound = 5e-3;

// Bounds: 1e-4 for F32 and 2e-3 for BF16 (issue 14), kF16Bound for F16; quantized types: measured (the
// largest difference seen, rounded up with a margin; docs/models.md has the measurements).
// For a quantized type the top-1 must agree where llama.cpp's margin exceeds 2 x bound.
inline constexpr ModelCase kModelCases[] = {
    {"stories260K", "shared:models/stories260K.gguf", "f32", 1e-4},
    {"tiny_f32", "make-model --preset tiny --type f32", "f32", 1e-4},
    {"tiny_f16", "make-model --preset tiny --type f16", "f16", kF16Bound},
    {"tiny_q8_0", "make-model --preset tiny --type q8_0", "f16", 1.5e-1},
    {"tiny_q4_0", "make-model --preset tiny --type q4_0", "f16", 1.5e-1},
    // Every weight type of make-model on llama: the 256-wide tiny (K-quants on every matrix),
    // and the tiny preset's 128-value rows, where llama.cpp's quantize falls back (Q4_K -> Q5_0,
    // Q6_K -> Q8_0, ...) and make-model follows it.
    // BF16: llama.cpp's CPU backend rounds the activations to bf16 (8 significant bits) for
    // BF16 matmuls, kvserve keeps them f32: ~10x F16's difference; llama.cpp's own result
    // moves by 1.4e-2 between batched and one-token evaluation, so 2e-3 is out of reach of any
    // fixed BF16 computation (docs/models.md).
    {"tiny_bf16", "make-model --preset tiny --type bf16", "f16", 3e-2},
    // The same BF16 file against llama.cpp computing its weights in f32: F32's bound.
    {"tiny_bf16_exact", "make-model --preset tiny --type bf16", "f32", 1e-4, "", 0, true},
    {"tiny_q4_k_m", "make-model --preset tiny --type q4_k_m", "f16", 0.15},
    {"tiny256_q4_k_m", "make-model --preset tiny-256 --type q4_k_m", "f16", 0.25},
    {"tiny256_q5_k_m", "make-model --preset tiny-256 --type q5_k_m", "f16", 0.2},
    {"tiny256_q6_k", "make-model --preset tiny-256 --type q6_k", "f16", 0.25},
    {"tiny256_q4_k_s", "make-model --preset tiny-256 --type q4_k_s", "f16", 0.25},
    {"tiny256_q3_k_m", "make-model --preset tiny-256 --type q3_k_m", "f16", 0.2},
    {"tiny256_q2_k", "make-model --preset tiny-256 --type q2_k", "f16", 0.2},
    {"tiny256_q4_1", "make-model --preset tiny-256 --type q4_1", "f16", 0.2},
    {"tiny256_q5_0", "make-model --preset tiny-256 --type q5_0", "f16", 0.15},
    {"tiny256_q5_1", "make-model --preset tiny-256 --type q5_1", "f16", 0.15},
    {"tiny256_iq4_nl", "make-model --preset tiny-256 --type iq4_nl", "f16", 0.2},
    {"tiny256_iq4_xs", "make-model --preset tiny-256 --type iq4_xs", "f16", 0.25},
    {"m110_f32", "make-model --preset 110m --type f32", "f32", 1e-4},
    {"m110_f16", "make-model --preset 110m --type f16", "f16", kF16Bound},
    {"m110_q8_0", "make-model --preset 110m --type q8_0", "f16", 1.5e-1},
    {"m110_q4_0", "make-model --preset 110m --type q4_0", "f16", 1.5e-1},
    {"llama3_tiny_f32", "make-model --preset llama3-tiny --type f32", "f32", 1e-4},
    {"llama3_tiny_f16", "make-model --preset llama3-tiny --type f16", "f16", kF16Bound},
    {"llama3_tiny256_q4_k_m", "make-model --preset llama3-tiny-256 --type q4_k_m", "f16", 0.25},
    {"llama3_tiny256_q6_k", "make-model --preset llama3-tiny-256 --type q6_k", "f16", 0.3},
    {"qwen2_tiny_f32", "make-model --arch qwen2 --preset tiny --type f32", "f32", 1e-4},
    {"qwen2_tiny_f16", "make-model --arch qwen2 --preset tiny --type f16", "f16", kF16Bound},
    {"qwen2_tiny256_q4_k_m", "make-model --arch qwen2 --preset tiny-256 --type q4_k_m", "f16", 0.2},
    {"qwen2_tiny256_q6_k", "make-model --arch qwen2 --preset tiny-256 --type q6_k", "f16", 0.2},
    {"qwen3_tiny_f32", "make-model --arch qwen3 --preset tiny --type f32", "f32", 1e-4},
    {"qwen3_tiny_f16", "make-model --arch qwen3 --preset tiny --type f16", "f16", kF16Bound},
    {"qwen3_tiny_q8_0", "make-model --arch qwen3 --preset tiny --type q8_0", "f16", 1.5e-1},
    {"qwen3_tiny256_q4_k_m", "make-model --arch qwen3 --preset tiny-256 --type q4_k_m", "f16", 0.2},
    {"qwen3_tiny256_q6_k", "make-model --arch qwen3 --preset tiny-256 --type q6_k", "f16", 0.2},
    {"phi3_tiny_f32", "make-model --arch phi3 --preset tiny --type f32", "f32", 1e-4,
     "--max-model-len 1024"},
    {"phi3_tiny_f16", "make-model --arch phi3 --preset tiny --type f16", "f16", kF16Bound,
     "--max-model-len 1024"},
    {"phi3_tiny256_q4_k_m", "make-model --arch phi3 --preset tiny-256 --type q4_k_m", "f16", 0.25,
     "--max-model-len 1024"},
    {"phi3_tiny256_q6_k", "make-model --arch phi3 --preset tiny-256 --type q6_k", "f16", 0.2,
     "--max-model-len 1024"},
    // Gemma: GELU. kvserve computes it exactly; llama.cpp's CPU backend reads an f16 table
    // (ggml's GGML_GELU_FP16): up to ~1e-3 apart on these models (docs/models.md).
    {"gemma2_tiny_f32", "make-model --arch gemma2 --preset tiny --type f32", "f32", 1.5e-3},
    {"gemma2_tiny_f16", "make-model --arch gemma2 --preset tiny --type f16", "f16", kF16Bound},
    {"gemma2_tiny256_q4_k_m", "make-model --arch gemma2 --preset tiny-256 --type q4_k_m", "f16",
     0.1},
    {"gemma2_tiny256_q6_k", "make-model --arch gemma2 --preset tiny-256 --type q6_k", "f16", 0.1},
    {"gemma3_tiny_f32", "make-model --arch gemma3 --preset tiny --type f32", "f32", 1.5e-3},
    {"gemma3_tiny_f16", "make-model --arch gemma3 --preset tiny --type f16", "f16", kF16Bound},
    {"gemma3_tiny_q4_0", "make-model --arch gemma3 --preset tiny --type q4_0", "f16", 1.5e-1},
    {"gemma3_tiny256_q4_k_m", "make-model --arch gemma3 --preset tiny-256 --type q4_k_m", "f16",
     0.15},
    {"gemma3_tiny256_q6_k", "make-model --arch gemma3 --preset tiny-256 --type q6_k", "f16", 0.15},
    {"deepseek2_tiny_f32", "make-model --arch deepseek2 --preset tiny --type f32", "f32", 1e-4},
    // MoE: a rounding difference that reorders two experts' router scores changes the chosen
    // experts and moves that position's logprobs by far more than the rounding itself
    // (docs/models.md): the non-F32 bounds of the MoE cases are measured per case, and the
    // 8-bit ones allow a few such positions (routing_flips) under a dense-like bound.
    {"deepseek2_tiny_f16", "make-model --arch deepseek2 --preset tiny --type f16", "f16", 5e-3},
    // 1.67 measured after the integer matmuls of the K-quant work (their Q8_0 rounding moved
    // some router ties): an MoE routing case, no position decisive at this bound.
    {"deepseek2_tiny_q8_0", "make-model --arch deepseek2 --preset tiny --type q8_0", "f16", 0.2, "",
     3},
    {"deepseek2_lite_f32", "make-model --arch deepseek2 --preset tiny-lite --type f32", "f32",
     1e-4},
    {"deepseek2_lite_f16", "make-model --arch deepseek2 --preset tiny-lite --type f16", "f16",
     3e-2},
    {"deepseek2_lite_q4_0", "make-model --arch deepseek2 --preset tiny-lite --type q4_0", "f16",
     2.5e-1},
    {"qwen2moe_tiny_f32", "make-model --arch qwen2moe --preset tiny --type f32", "f32", 1e-4},
    {"qwen2moe_tiny_f16", "make-model --arch qwen2moe --preset tiny --type f16", "f16", 1e-2},
    {"qwen2moe_tiny_q4_0", "make-model --arch qwen2moe --preset tiny --type q4_0", "f16", 2.5e-1},
    {"qwen3moe_tiny_f32", "make-model --arch qwen3moe --preset tiny --type f32", "f32", 1e-4},
    {"qwen3moe_tiny_f16", "make-model --arch qwen3moe --preset tiny --type f16", "f16", 1e-2},
    {"qwen3moe_tiny_q8_0", "make-model --arch qwen3moe --preset tiny --type q8_0", "f16", 0.2, "",
     3},
    // gpt-oss: sinks, YaRN, sliding layers, biased router and experts, clamped SwiGLU. Its
    // published files hold MXFP4 experts: llama.cpp's mxfp4_moe mix (experts MXFP4, other
    // matrices Q8_0) quantizes their activations to Q8_0 blocks on both sides.
    {"gpt_oss_tiny_f32", "make-model --arch gpt-oss --preset tiny --type f32", "f32", 1e-4},
    {"gpt_oss_tiny_mxfp4_moe", "make-model --arch gpt-oss --preset tiny --type mxfp4_moe", "f16",
     0.2, "", 3},
};

// A vocabulary whose tokenization of the 46 strings of ../shared/tokenizers/*.inp must equal
// llama.cpp's model.tokenize (add_special = false, parse_special = false).
struct VocabCase {
  const char* name;
  const char* source;  // as ModelCase::source; llama.cpp loads it with vocabOnly
};

inline constexpr VocabCase kVocabCases[] = {
    {"make_model_tiny", "make-model --preset tiny --type q4_0"},
    {"make_model_110m", "make-model --preset 110m --type q4_0"},
    {"llama3_bpe", "make-model --preset llama3-tiny --type q4_0"},
    {"qwen2_bpe", "make-model --arch qwen2 --preset tiny --type q4_0"},
    {"qwen3_bpe", "make-model --arch qwen3 --preset tiny --type q4_0"},
    {"phi3_spm", "make-model --arch phi3 --preset tiny --type q4_0"},
    {"gemma_spm", "make-model --arch gemma3 --preset tiny --type q4_0"},
    {"qwen3_0_6b_bpe", "make-model --arch qwen3 --preset qwen3-0.6b --type q4_0"},
    {"gemma3_1b_spm", "make-model --arch gemma3 --preset gemma3-1b --type q4_0"},
    {"gpt_oss_o200k", "make-model --arch gpt-oss --preset tiny --type q4_0"},
    {"stories260K", "shared:models/stories260K.gguf"},
    {"llama_spm", "shared:tokenizers/ggml-vocab-llama-spm.gguf"},
    {"phi_3", "shared:tokenizers/ggml-vocab-phi-3.gguf"},
    {"gpt_2", "shared:tokenizers/ggml-vocab-gpt-2.gguf"},
    {"starcoder", "shared:tokenizers/ggml-vocab-starcoder.gguf"},
    {"deepseek_llm", "shared:tokenizers/ggml-vocab-deepseek-llm.gguf"},
    {"deepseek_coder", "shared:tokenizers/ggml-vocab-deepseek-coder.gguf"},
};

}  // namespace kvserve::compat
