// KvConnector: what the scheduler needs from the KV tiers below the device pool (CPU memory,
// files, Redis; offload/ implements it). kv/ only declares it, so the KV manager and the
// scheduler stay free of I/O.
//
// Protocol (scheduler thread):
//   1. FindLongestCachedPrefix(prompt, salt, connector) counts a block as present when the
//      device pool caches it or Contains(group, hash) says a tier holds it.
//   2. AllocateNew gives every tier-only block of the hit a fresh device block
//      (NewBlocks::loads); the scheduler hands them to StartLoad and parks the request.
//   3. PollLoads reports finished loads: the first num_loaded entries of the request's list
//      have their bytes in their device blocks (the rest were not found or failed their
//      checks, and hold unspecified bytes). The scheduler then registers those blocks
//      (CommitLoadedBlocks).
//   4. CancelLoad (abort): once it returns, nothing writes the load's blocks any more.
// Thread safety: every method is called from the scheduler thread only. Implementations do
// their I/O on their own threads and may write a load's device blocks there, between
// StartLoad and the PollLoads that reports it (or CancelLoad): the scheduler neither runs
// nor frees a request while its blocks load.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/block_pool.h"
#include "kv/group_manager.h"
#include "kv/hash.h"

namespace kvserve::kv {

// One block to fill from a tier: entry `index` of the request's table in `group`.
struct BlockLoad {
  int group = 0;
  int64_t index = 0;
  BlockId block = kNullBlock;
  BlockHash hash;
};

struct FinishedLoad {
  RequestId id = 0;
  size_t num_loaded = 0;  // leading entries of the StartLoad list now in device memory
  // Loaded tokens by the tier that served them (the connector's tier numbering): each table
  // index loaded counts block_size tokens for the slowest tier any group read it from.
  std::vector<int64_t> tokens_per_tier;
};

class KvConnector {
 public:
  virtual ~KvConnector() = default;
  // Whether some tier probably holds `hash` of `group` (a later load may still miss).
  virtual bool Contains(int group, const BlockHash& hash) = 0;
  // Starts filling `loads` (ordered by index, then group) for request `id`.
  virtual void StartLoad(RequestId id, std::vector<BlockLoad> loads) = 0;
  // Loads that finished since the last call, their bytes copied into the device blocks.
  // When none has finished, waits up to `wait` for one.
  virtual std::vector<FinishedLoad> PollLoads(std::chrono::milliseconds wait) = 0;
  virtual void CancelLoad(RequestId id) = 0;
};

}  // namespace kvserve::kv
