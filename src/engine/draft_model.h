// DraftModel: the proposer of speculative decoding's `draft_model` method (engine/speculative.h):
// a small model with the target's vocabulary whose KV lives in its own groups of the engine's
// KvCacheManager, after the target's (model::AppendLayout): pooled, budgeted, prefix-cached and
// tiered with the target's blocks, under the same block tables' bookkeeping.
//
// Each step the engine runs the draft over the same tokens as the target (Mirror), so the
// draft's KV covers exactly the target's computed positions (prefill chunks, decodes, verified
// drafts; a prefix hit restores both). Then Propose drafts k tokens per request greedily: k
// draft forwards of one token per request, writing draft KV at positions the next step's Mirror
// rewrites anyway, so those slots are released again right after.
// Thread safety: one thread (the engine's).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace kvserve::engine {

class DraftModel {
 public:
  // note: the draft's layout is groups [first_group, kv.num_groups()) and layers (slots)
  // [first_layer, kv.config().num_layers) of kv's, which outlives this.
  DraftModel(std::unique_ptr<model::Model> model, const kv::KvCacheManager& kv, int first_group,
             int first_layer, int max_num_seqs);

  int first_group() const { return first_group_; }

  // Runs the draft over `batch` (the target's step; its block tables hold every group) without
  // logits, writing the draft's KV of the step's tokens.
  void Mirror(const model::Batch& batch, ThreadPool& pool);

  // One request to draft for: its tokens so far (the last one not yet computed) and how many
  // drafts it may take.
  struct Job {
    kv::RequestId id = 0;
    std::span<const int32_t> tokens;
    int64_t num_computed_tokens = 0;  // = tokens.size() - 1
    int64_t max_drafts = 0;
  };
  // Greedy drafts per job (empty when its KV slots could not be reserved). Reserves the slots
  // of the drafted positions in `kv` while drafting and releases them after.
  std::vector<std::vector<int32_t>> Propose(std::span<const Job> jobs, kv::KvCacheManager& kv,
                                            ThreadPool& pool);

 private:
  std::unique_ptr<model::Model> model_;
  model::KvViews views_;
  int first_group_;
  int num_groups_;
  model::Batch batch_;
  std::vector<std::span<const int32_t>> tables_;  // (sequences, draft groups)
  std::vector<float> logits_;                     // (max_num_seqs, vocab)
};

// Opens the draft model of `path` for a target with `target_vocab` (the same vocabulary: equal
// size, and equal token texts when both files carry them): InvalidArgument otherwise.
Result<std::shared_ptr<const gguf::GgufFile>> OpenDraftModel(const std::string& path,
                                                             const gguf::GgufFile& target);

}  // namespace kvserve::engine
