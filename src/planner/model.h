// What the planner knows about a model: its weights, split into parts that behave differently
// under tensor parallelism and CPU offload, and its KV layout as kv/ specs per group of layers.
//
// A ModelDesc comes from a preset data file (presets.h) or from a GGUF file (gguf_model.h).
// It holds no tensors; it is plain data, copyable, immutable once built.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/spec.h"
#include "model/kv_layout.h"

namespace kvserve::planner {

// How a weight part is laid out over the ranks of one tensor-parallel group.
enum class TpPlacement {
  kSharded,     // each rank holds bytes / tp
  kReplicated,  // each rank holds all the bytes (norms, routers, single-head latent projections)
};
std::string_view TpPlacementName(TpPlacement p);

// One part of the weights, e.g. "engram" (188.8 GiB, sharded, offloadable).
struct WeightPart {
  std::string name;
  uint64_t bytes = 0;  // the whole model's bytes for this part (not per rank)
  TpPlacement tp = TpPlacement::kSharded;
  bool offloadable = false;  // may live in CPU memory (--cpu-offload-weights NAME)
  std::string note;
};

// One group of layers that share a KV layout, e.g. DeepSeek-V4.1's "latent/2": written by
// layers 2, 8, 14 and read by 3-7, 9-13, 15-19. Only `layers` get an allocation (DESIGN.md 3:
// layers that read another layer's KV get none).
struct KvGroupDesc {
  std::string name;
  kv::KvLayoutSpec spec;     // as the model stores it, before TP splits the heads
  std::vector<int> layers;   // layers that own an allocation, ascending
  std::vector<int> readers;  // layers that only read another layer's cache (no allocation)
  bool fixed_dtype = false;  // true: --kv-cache-dtype does not apply (a trained format)
  std::string note;
};

struct ModelDesc {
  std::string name;
  std::string description;
  std::string source;  // "preset deepseek-v4.1-flash" or the GGUF path
  int num_layers = 0;
  int64_t max_model_len = 0;           // the model's longest context
  uint64_t runtime_reserve_bytes = 0;  // activations, CUDA graphs, context: per device
  uint64_t total_weight_bytes = 0;     // sum of parts
  std::vector<WeightPart> parts;
  std::vector<KvGroupDesc> kv_groups;
  // A token capacity some document quotes for this model, to set beside the computed one
  // (the seed quotes ~20M tokens for DeepSeek-V4.1-Flash on H200 TP4); nullopt when none.
  std::optional<int64_t> quoted_kv_tokens;
  std::string quoted_kv_tokens_source;
  // GGUF models only: the shape the server builds its KV config from. When set, PlanKvConfig
  // builds the config with model::MakeModelKvLayout (the function `kvserve serve` reaches),
  // and kv_groups above only name the groups for the report.
  std::optional<model::ModelKvShape> kv_shape;

  const WeightPart* FindPart(std::string_view name) const;  // nullptr when absent
};

// Checks the description is self-consistent: parts sum to the total, at least one KV group,
// each group's spec valid for `block_size`, layer indices inside [0, num_layers) and never
// allocated twice.
Status ValidateModel(const ModelDesc& model, int block_size);

// Parses "0-39", "2,8,14", "0-35/2" (every 2nd), "0-4,6-10" into ascending layer indices.
Result<std::vector<int>> ParseLayerList(std::string_view text);
// The inverse, compacted: {0,1,2,3,5} -> "0-3,5".
std::string FormatLayerList(const std::vector<int>& layers);

}  // namespace kvserve::planner
