// Model: the one interface between the engine and a forward pass. Every architecture
// (model/architecture.h's registry) implements it; the engine knows nothing else about models.
//
// A step is a ragged Batch: each sequence contributes its next tokens (a prefill chunk or one
// decode token) at positions [start_pos, start_pos + tokens.size()), with one block table per
// KV group, in the order of the model's KV layout (model/kv_layout.h; kv::KvCacheManager hands
// them out in that order). A model with one KV group is the one-group case of the same thing.
//
// Contract of Forward (DESIGN.md section 5): for every sequence, write its tokens' KV into the
// cache through its block tables, read its KV of [0, last position] back as stored, and write
// the logits of its last num_logits tokens (one for a decode or a prompt's last chunk; 1 + k
// when k drafted tokens are verified, model/model.h's speculative decoding). A sequence's logits
// depend only on its own tokens and KV: never on the rest of the batch, on how its prompt was
// chunked or on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "tensor/kv_view.h"

namespace kvserve::model {

// One sequence's part of a step.
struct SequenceInput {
  std::span<const int32_t> tokens;  // this step's tokens, at least one
  int32_t start_pos = 0;            // position of tokens[0]
  // block_tables[g]: the sequence's blocks in KV group g, covering positions
  // [0, start_pos + tokens.size()) (entry i holds positions [i * block_size, (i + 1) *
  // block_size)).
  std::span<const std::span<const int32_t>> block_tables;
  // Logits of the last num_logits tokens (0: none), in position order. The logits of a
  // position depend only on the tokens up to it, so they are the same whichever row asks.
  int32_t num_logits = 0;
};

// A ragged batch: every sequence's tokens are processed in one Forward, concatenated in order.
struct Batch {
  std::vector<SequenceInput> sequences;

  int64_t NumTokens() const;
  int64_t NumLogitRows() const;  // sum of num_logits
};

// Where each KV group's arena lives (the arenas never move, so views are taken once).
// paged[g] is set for full and sliding-window groups, latent[g] for compressed-latent groups;
// the other entry of a group is default (no layers).
struct KvViews {
  std::vector<tensor::PagedKvView> paged;       // (groups)
  std::vector<tensor::PagedLatentView> latent;  // (groups)
};

// The views of every group of `kv`.
KvViews ViewsOf(const kv::KvCacheManager& kv);
// Groups [first_group, first_group + num_groups) of `views`, layers (slots) [first_layer,
// first_layer + num_layers) renumbered from 0: what each of two models whose layouts
// AppendLayout joined reads.
KvViews SubViews(const KvViews& views, int first_group, int num_groups, int first_layer,
                 int num_layers);

// Sizes a model allocates its scratch for, at load.
struct LoadOptions {
  int64_t max_batch_tokens = 512;             // most tokens in one Forward
  std::optional<int32_t> max_context_tokens;  // longest sequence; default the context length
  int max_threads = 0;                        // largest ThreadPool used; 0 = DefaultThreadCount()
};

// options with its defaults filled in: max_context_tokens = the model's context length,
// max_threads = DefaultThreadCount(). InvalidArgument for non-positive sizes.
Result<LoadOptions> ResolveLoadOptions(const LoadOptions& options, int64_t context_length);

class Model {
 public:
  virtual ~Model() = default;

  virtual std::string_view architecture() const = 0;
  virtual int64_t vocab_size() const = 0;

  // Runs one step (the contract above). logits: (batch.NumLogitRows(), vocab_size()), rows in
  // sequence order, then position order; may be null when no sequence wants logits.
  // note: batch.NumTokens() <= max_batch_tokens, positions < max_context_tokens, tokens in
  // [0, vocab_size), kv built from the model's KV layout, pool.num_threads() <= max_threads
  // (all CHECKed).
  virtual void Forward(const Batch& batch, const KvViews& kv, ThreadPool& pool, float* logits) = 0;
};

}  // namespace kvserve::model
