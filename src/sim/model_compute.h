// ModelCompute: what one forward step of a model costs to compute, as plain data for the cost
// model (sim/cost_model.h): its weight matrices (with layer counts, dtypes, TP placement and
// routed experts), its query heads and the indexer of its latent KV groups.
//
// Sources (one source of truth with `kvserve plan`):
//   * a model preset's "compute" object (src/planner/presets/models/NAME.jsonc), beside the
//     weights and KV layout the planner already reads from the same file;
//   * a GGUF file's tensor table: every 2-D or 3-D tensor of the forward pass, as stored.
// The KV side (which layers attend over which KV group) is not repeated here: it comes from
// the planner's ModelDesc (planner/model.h) and the KV config the server would build.
//
// Plain data, copyable; every function is pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::sim {

// One weight matrix of the forward pass (or the identical matrices of several layers). Every
// row (token) that passes through it costs 2 x params FLOPs; a step reads its bytes once.
struct Matrix {
  std::string name;           // "attention", "mlp", "blk.attn_q", "output", ...
  int num_layers = 1;         // how many times one token passes through it
  double params = 0;          // per layer (per expert when num_experts > 0)
  double bytes = 0;           // per layer (per expert), as stored
  std::string dtype = "bf16";  // storage dtype name: picks the device's peak FLOP/s
  bool replicated = false;    // every TP rank holds (and computes) all of it
  int num_experts = 0;        // > 0: routed experts, experts_per_token used per token
  int experts_per_token = 0;
  bool logits_only = false;   // applied only to the rows that are sampled (the LM head)
};

struct ModelCompute {
  std::string name;
  int num_layers = 0;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int num_q_heads = 0;          // attention query heads (before TP)
  int index_heads = 0;          // latent groups' indexer heads (DeepSeek-V4.1); 0: none
  int index_top_k = 0;          // entries each query attends to; 0: every entry
  int activation_bytes = 2;     // bytes per activation value moved by TP all-reduces
  std::vector<Matrix> matrices;

  // Parameters one token activates (routed experts counted experts_per_token times; the
  // LM head included).
  double ActiveParamsPerToken() const;
  // Bytes of every matrix (all experts).
  double TotalWeightBytes() const;
};

// The "compute" object of a model preset's text (the preset's other fields are ignored here).
// Format (presets/models/deepseek-v4.1-flash.jsonc is a full example):
//   "compute": {"hidden_size": N, "vocab_size": N, "q_heads": N, "index_heads": N,
//     "index_top_k": N, "matrices": [{"name", "layers": "0-31" (absent: once per step),
//     "params": N, "dtype": "bf16", "replicated": bool, "num_experts": N,
//     "experts_per_token": N, "logits_only": bool}]}
// bytes = params x the dtype's bytes per value (tensor/dtype.h). InvalidArgument naming the
// field; NotFound when the preset has no "compute" object.
Result<ModelCompute> ParseComputePreset(std::string_view preset_text);
// The embedded preset `name` (planner::EmbeddedPresetFiles).
Result<ModelCompute> LoadComputePreset(std::string_view name);

// From a GGUF file's tensors: `blk.N.<suffix>` matrices grouped by (suffix, shape, dtype);
// 3-D `*_exps` tensors are routed experts (`{arch}.expert_used_count` per token);
// `output.weight` (or a tied `token_embd.weight`) is the LM head; 1-D tensors and the
// embedding lookup cost nothing here. Heads from `{arch}.attention.head_count` (kvserve-v41:
// also `indexer.head_count` and `indexer.top_k`). InvalidArgument when the file has no
// weight tensors (a shape-only file).
Result<ModelCompute> ComputeFromGguf(const gguf::GgufFile& file);

}  // namespace kvserve::sim
