// StreamCopy: a large memcpy whose destination this thread does not read back soon (a KV block
// loaded from an offload tier into the device pool, a block stored into the CPU tier).
//
// Contract: copies `bytes` bytes from `src` to `dst` (the ranges must not overlap); the bytes
// written are exactly memcpy's. On CPUs with AVX-512F or AVX2 a copy of at least
// kStreamCopyMinBytes uses non-temporal (streaming) stores: the destination's cache lines are
// not read for ownership first, so the copy moves two bytes of memory traffic per byte, not
// three, and costs about a fifth less CPU time than glibc's memcpy at these sizes (which uses
// cached stores up to a threshold far above a KV block on CPUs with a large shared cache).
// The copy ends with a store fence, so a thread that later synchronises with this one (a mutex,
// a future) sees every byte. Smaller copies, and other CPUs, use memcpy.
// Thread safety: none needed (no state besides a CPU-feature probe done once).
#pragma once

#include <cstddef>

namespace kvserve {

inline constexpr size_t kStreamCopyMinBytes = 64 * 1024;

void StreamCopy(void* dst, const void* src, size_t bytes);

}  // namespace kvserve
