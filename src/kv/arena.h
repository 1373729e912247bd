// KvArena: one group's KV memory, allocated once, never grown.
//
// Shape (block-major, so one block of one group is one contiguous page set that the offload
// tiers can copy with one memcpy):
//   arena[num_blocks][writer layer i of the group][layer page]
//   full / sliding layer page:  K [segments][block_size][segment_bytes] then V the same
//                               (head-major: tensor/kv_view.h; shared_kv: only K, V reads it)
//   latent layer page:          latent rows [entries_per_block][latent_row_bytes] then
//                               index rows [entries_per_block][index_row_bytes]
// Example: 5 layers, 4 kv heads x 8 dims, f32, block 16: row 128 B, segment 8 values = 32 B,
//   layer page 4096 B, block 20480 B; the V of head 1, token slot 3, layer 2, block 7 is at
//   7 * 20480 + 2 * 4096 + 16 * 128 + (1 * 16 + 3) * 32.
//
// Owns: the aligned buffer (or nothing, for the simulator and planner, which run the same
// manager without memory). Thread safety: the buffer is written by the forward pass under the
// scheduler's block ownership rules; the object itself is immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kv/block_pool.h"
#include "kv/config.h"
#include "tensor/kv_view.h"

namespace kvserve::kv {

class KvArena {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // Allocates num_blocks * block_bytes bytes aligned to kAlignment (to kHugePage, with
  // transparent huge pages requested, from 2 MiB on) when allocate_memory is true; otherwise
  // only records the sizes.
  KvArena(int64_t block_bytes, int64_t num_blocks, bool allocate_memory);

  int64_t block_bytes() const { return block_bytes_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Bytes actually allocated (0 without memory).
  int64_t allocated_bytes() const { return data_ ? block_bytes_ * num_blocks_ : 0; }
  std::byte* data() const { return data_.get(); }

  // Start of block `id`'s page set. note: only with memory.
  std::byte* BlockData(BlockId id) const;

  // Makes every page of the arena resident now (MADV_POPULATE_WRITE, Linux 5.14+; elsewhere a
  // write to each 4 KiB page), in parallel slices on `threads` threads (blocks in id order,
  // the order the free queue first hands them out). Afterwards no write to the arena takes a
  // page fault: a tier load into a block never written (every block, after a restart) copies
  // at memory speed. Costs the arena's bytes of resident memory up front instead of on first
  // use, nothing more (allocated_bytes() is unchanged); about 1 s per 2-3 GiB here. Call
  // before the arena is shared with other threads. No-op without memory.
  void Prefault(int threads) { PrefaultBlocks(num_blocks_, threads); }
  // The same for blocks [0, min(count, num_blocks)) only: the first blocks the free queue hands
  // out, so the first steps' K/V writes take no page fault (KvCacheManagerOptions::
  // prefault_tokens).
  void PrefaultBlocks(int64_t count, int threads);

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  int64_t block_bytes_;
  int64_t num_blocks_;
  std::unique_ptr<std::byte, FreeDeleter> data_;
};

// The kernel view of a full or sliding group: layers[l] is set for every writer and reader of
// the group (a reader gets its source's pointers), left null for other layers.
// note: the group's spec is full or sliding; the arena has memory.
tensor::PagedKvView MakeKvView(const KvCacheConfig& config, int group, const KvArena& arena);

// The same for a latent group.
tensor::PagedLatentView MakeLatentView(const KvCacheConfig& config, int group,
                                       const KvArena& arena);

}  // namespace kvserve::kv
