// A tiny script language for scheduler traces, run against the real Scheduler and
// KvCacheManager (bookkeeping only, no memory) with a fake "model": the token sampled after a
// history is a hash of that history, so outputs depend only on each request's own tokens.
//
//   config blocks=8 block_size=4 max_num_seqs=4 max_num_batched_tokens=16 max_model_len=64
//   add A prompt=10 max=4            # also: prefix=B:8 (first 8 tokens of B's prompt),
//                                    #       stop_after=2 (the 2nd output token stops), salt=x
//   step                             # Schedule, sample, UpdateFromOutput
//   expect scheduled=A:10*,B:6 running=A,B waiting= free_blocks=3
//   abort A
//   run                              # steps until every request finished
//   expect_solo                      # each finished request's output == its run alone
// `expect` keys (each optional): scheduled (name:tokens, * = sampled), running, waiting,
// preempted, finished (name:reason this step), free_blocks, out (name:outputs), computed
// (name:num_computed), hit (name:cached tokens at the latest admission), tokens (batched this
// step), preemptions (total). KV integrity is checked after every step.
#pragma once

#include <string>
#include <vector>

namespace kvserve::scheduler::testing {

// Runs a script; returns the failures (empty when it passed), each naming the line.
std::vector<std::string> RunTrace(const std::string& script);

}  // namespace kvserve::scheduler::testing
