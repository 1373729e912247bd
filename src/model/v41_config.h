// V41Config: the hyperparameters of a GGUF `kvserve-v41` model (DeepSeek-V4.1-style hybrid
// attention, dense SwiGLU FFN), read from metadata, and the model's KV cache groups.
//
// Attention layout (docs/v41-attention.md has the full story):
//   * every layer keeps a sliding window of its own KV rows (one MQA head of latent_dim values,
//     K = V, FP8 E4M3 + E8M0/32);
//   * source layers (`compress.source_layers`) also write compressed entries: one per
//     `ratio` consecutive tokens, latent_dim values (FP4 E2M1 + E4M3/16) plus an indexer key of
//     index_dim values (FP4 E2M1 + E8M0/32);
//   * layer l reads the entries of the nearest source layer <= l (layers below the first
//     source read none), picked per query by the indexer (top_k).
//
// GGUF metadata (prefix "kvserve-v41."): context_length, embedding_length, block_count,
// feed_forward_length, vocab_size (only when the file has no token_embd.weight),
// attention.head_count, attention.key_length (latent_dim), attention.sliding_window,
// attention.layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base,
// compress.source_layers (i32 array, increasing), compress.ratios (i32 array, one per source),
// indexer.head_count, indexer.key_length, indexer.top_k, indexer.candidate_blocks,
// indexer.candidate_block_size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kv/config.h"

namespace kvserve::model {

inline constexpr const char* kV41Architecture = "kvserve-v41";

struct V41Source {
  int layer = 0;  // writes compressed entries
  int ratio = 1;  // tokens per entry
};

struct V41Config {
  std::string architecture = kV41Architecture;
  int64_t context_length = 0;
  int64_t dim = 0;
  int64_t num_layers = 0;
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  int64_t num_heads = 0;   // query heads; one KV head (MQA)
  int64_t latent_dim = 0;  // KV head dim = compressed entry dim
  int64_t rope_dim = 0;    // rope on the last rope_dim values of q heads, KV rows and entries
  double rope_freq_base = 10000;
  float rms_norm_eps = 1e-6f;
  int window = 0;                  // sliding window tokens (query included)
  std::vector<V41Source> sources;  // increasing layers
  int64_t index_heads = 0;
  int64_t index_dim = 0;
  int64_t index_top_k = 0;
  int64_t candidate_blocks = 2048;   // candidate stage: blocks kept
  int64_t candidate_block_size = 8;  // candidate stage: entries per block
  bool has_weights = false;          // false for shape-only files (inspect, planner)

  // The source layer read by `layer`: the nearest source <= layer; nullopt below the first.
  std::optional<V41Source> SourceOf(int layer) const;
};

// Metadata -> config, checked (positive dims, rope_dim even <= latent_dim, latent_dim a
// multiple of 32, index_dim a multiple of 32, sources increasing and in range, ratios >= 1 and
// <= window, top_k >= 1). With weights present, every tensor's shape is checked too.
Result<V41Config> ReadV41Config(const gguf::GgufFile& file);

// Where one layer's KV lives in the KV manager (kv/config.h "KV slots": kv::KvCacheConfig wants
// each layer id in exactly one group, so a layer's latent membership gets a slot id past
// num_layers, like planner/kv_config.cc).
struct V41LayerKv {
  int window_slot = 0;              // = layer, in group 0 (sliding window)
  std::optional<int> latent_group;  // its source's latent group
  int latent_slot = 0;              // the slot read (the source's slot for readers)
  bool writes_latent = false;       // a source layer
  int ratio = 1;
};

struct V41KvLayout {
  kv::KvCacheConfig kv_config;
  std::vector<V41LayerKv> layers;  // (num_layers)
};

// Group 0: SlidingWindow{window, 1 head, latent_dim, FP8 E4M3/E8M0-32, shared_kv} over every
// layer. Then one CompressedLatent group per distinct ratio (first-appearance order): writers
// = its source layers, readers = the layers reading them; slots num_layers, num_layers + 1, ...
// assigned group by group, writers first then readers, each in layer order.
// Example (the flash shape): ratio 2 group: writers 2, 8, 14 -> slots 40-42, readers 3-7,
// 9-13, 15-19 -> slots 43-57; ratio 1 group: writer 20 -> 58, readers 21-39 -> 59-77.
V41KvLayout MakeV41KvLayout(const V41Config& config, int block_size, int64_t max_model_len,
                            int64_t max_chunk_tokens);

// Byte truth for `kvserve inspect` (V4.1-Flash: 890 B/token global, 2.58 MiB window/sequence).
//   global per token = sum over sources (latent_row + index_row) / ratio
//     flash: (288 + 68) x (3 x 1/2 + 1 x 1) = 720 B latent + 170 B indexer = 890 B
//   window per sequence = window x layers x row (FP8 E4M3 + E8M0/32 of latent_dim values)
//     flash: 128 x 40 x 528 B = 2703360 B = 2.58 MiB
struct V41KvBytes {
  double latent_bytes_per_token = 0;  // compressed latent rows
  double index_bytes_per_token = 0;   // indexer keys
  double global_bytes_per_token = 0;  // the two above
  int64_t window_row_bytes = 0;       // one token, one layer
  int64_t window_bytes_per_sequence = 0;
  std::vector<std::string> lines;  // the formulas, for people
};
V41KvBytes ComputeV41KvBytes(const V41Config& config);

}  // namespace kvserve::model
