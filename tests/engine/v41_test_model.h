// The small kvserve-v41 model the engine tests share, written once per process.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/check.h"
#include "engine_test_util.h"
#include "model/v41_random_model.h"

namespace kvserve::engine::testing {

// A small v41 model: 4 layers, window 8, layer 1 compresses 2:1 (read by itself), layer 2
// 1:1 (read by 2 and 3), top-k 4, so prompts of 20-40 tokens exercise the indexer.
inline model::V41ModelSpec SmallSpec() {
  model::V41ModelSpec spec;
  model::V41Config& c = spec.config;
  c.context_length = 256;
  c.dim = 64;
  c.num_layers = 4;
  c.ffn_dim = 96;
  c.vocab_size = 128;
  c.num_heads = 2;
  c.latent_dim = 32;
  c.rope_dim = 8;
  c.window = 8;
  c.sources = {{1, 2}, {2, 1}};
  c.index_heads = 2;
  c.index_dim = 32;
  c.index_top_k = 4;
  spec.weights.seed = 9;
  spec.weights.norm_spread = 0.1f;
  return spec;
}

inline std::string SmallModelPath() {
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() /
                           fmt::format("kvserve-v41-test-{}.gguf", ::getpid()))
                              .string();
    CHECK(model::V41ModelWriter(SmallSpec())->Write(p).ok());
    RemoveAtExit(p);
    return p;
  }();
  return path;
}

}  // namespace kvserve::engine::testing
