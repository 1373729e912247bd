#include "engine/draft_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/ops.h"

namespace kvserve::engine {

DraftModel::DraftModel(std::unique_ptr<model::Model> model, const kv::KvCacheManager& kv,
                       int first_group, int first_layer, int max_num_seqs)
    : model_(std::move(model)),
      views_(model::SubViews(model::ViewsOf(kv), first_group, kv.num_groups() - first_group,
                             first_layer, kv.config().num_layers - first_layer)),
      first_group_(first_group),
      num_groups_(kv.num_groups() - first_group),
      logits_(static_cast<size_t>(max_num_seqs) * static_cast<size_t>(model_->vocab_size())) {}

void DraftModel::Mirror(const model::Batch& batch, ThreadPool& pool) {
  batch_.sequences.clear();
  for (const model::SequenceInput& s : batch.sequences) {
    batch_.sequences.push_back(
        {s.tokens, s.start_pos, s.block_tables.subspan(first_group_, num_groups_), 0});
  }
  if (!batch_.sequences.empty()) model_->Forward(batch_, views_, pool, nullptr);
}

std::vector<std::vector<int32_t>> DraftModel::Propose(std::span<const Job> jobs,
                                                      kv::KvCacheManager& kv, ThreadPool& pool) {
  std::vector<std::vector<int32_t>> drafts(jobs.size());
  std::vector<size_t> active;  // jobs whose slots are reserved
  int64_t rounds = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].max_drafts == 0) continue;
    if (!kv.AllocateSlots(jobs[i].id, jobs[i].num_computed_tokens, jobs[i].max_drafts)) continue;
    active.push_back(i);
    rounds = std::max(rounds, jobs[i].max_drafts);
  }
  tables_.resize(active.size() * num_groups_);
  for (size_t a = 0; a < active.size(); ++a) {
    for (int g = 0; g < num_groups_; ++g) {
      tables_[a * num_groups_ + g] = kv.BlockTable(jobs[active[a]].id, first_group_ + g);
    }
  }
  const int64_t vocab = model_->vocab_size();
  std::vector<int32_t> input(active.size());  // (active): each one's token of this round
  for (size_t a = 0; a < active.size(); ++a) input[a] = jobs[active[a]].tokens.back();
  for (int64_t round = 0; round < rounds; ++round) {
    batch_.sequences.clear();
    std::vector<size_t> rows;  // (sequences): the active index of each
    for (size_t a = 0; a < active.size(); ++a) {
      const Job& job = jobs[active[a]];
      if (round >= job.max_drafts) continue;
      batch_.sequences.push_back(
          {std::span<const int32_t>(&input[a], 1),
           static_cast<int32_t>(job.num_computed_tokens + round),
           std::span<const std::span<const int32_t>>(tables_).subspan(a * num_groups_, num_groups_),
           1});
      rows.push_back(a);
    }
    model_->Forward(batch_, views_, pool, logits_.data());
    for (size_t row = 0; row < rows.size(); ++row) {
      const int32_t token =
          static_cast<int32_t>(kernels::ArgMax(logits_.data() + row * vocab, vocab));
      drafts[active[rows[row]]].push_back(token);
      input[rows[row]] = token;
    }
  }
  // The drafted positions' KV is rewritten by the verification step's Mirror: release them.
  for (size_t i : active) kv.TruncateSlots(jobs[i].id, jobs[i].num_computed_tokens);
  return drafts;
}

Result<std::shared_ptr<const gguf::GgufFile>> OpenDraftModel(const std::string& path,
                                                             const gguf::GgufFile& target) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> draft, gguf::GgufFile::Open(path));
  auto vocab_size = [](const gguf::GgufFile& f) -> int64_t {
    const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
    return embd != nullptr && embd->dims.size() == 2 ? embd->dims[1] : -1;
  };
  if (vocab_size(*draft) != vocab_size(target)) {
    return InvalidArgument(fmt::format(
        "--speculative-config: the draft model {} has a vocabulary of {} tokens, the target {}",
        path, vocab_size(*draft), vocab_size(target)));
  }
  Result<std::vector<std::string>> a = target.GetStringArray("tokenizer.ggml.tokens");
  Result<std::vector<std::string>> b = draft->GetStringArray("tokenizer.ggml.tokens");
  if (a.ok() && b.ok() && *a != *b) {
    return InvalidArgument(fmt::format(
        "--speculative-config: the draft model {} has another vocabulary than the target", path));
  }
  return std::shared_ptr<const gguf::GgufFile>(std::move(draft));
}

}  // namespace kvserve::engine
