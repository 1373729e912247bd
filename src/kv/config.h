// KvCacheConfig: which layers own KV of which spec, the block size, and the capacity maths.
//
// A model maps its layers to groups. A group is one spec plus the layers that write (and own
// an allocation for) KV of that spec; reader layers read another layer's KV and get none.
// Each group gets its own arena and block pool (kv/arena.h, kv/block_pool.h); all groups use
// the same block size, so the same token-block hashes index every group.
//
// Budget split (ComputeCapacity): proportional to what one max_model_len request needs, so all
// groups run out together at max_model_len. With per-block arena bytes P_g = PageSizeBytes *
// num_layers and peak blocks per request B_g = MaxBlocksPerRequest:
//   M        = sum_g B_g * P_g                       bytes of one max-length request
//   usable   = budget - sum_g P_g                    (one reserved null block per group)
//   C        = usable / M                            max concurrency at max_model_len
//   blocks_g = floor(usable * B_g / M) + 1           so sum_g blocks_g * P_g <= budget
// Example: 5 layers, 4 kv heads x 8 dims, f32, block 16 -> P = 5 * 4096 B = 20480 B;
//   max_model_len 512 -> B = 32, M = 655360 B; budget 1 MiB: usable = 1028096 B,
//   blocks = floor(1028096 * 32 / 655360) + 1 = 51, C = 1.5688.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/spec.h"
#include "tensor/dtype.h"

namespace kvserve::kv {

// A layer that reads the KV written by source_layer (no allocation of its own).
struct KvReader {
  int layer = 0;
  int source_layer = 0;
};

struct KvCacheGroup {
  KvLayoutSpec spec;
  std::vector<int> layers;        // writers: each owns one page per block in this group
  std::vector<KvReader> readers;  // readers: source_layer must be in `layers`
};

struct KvCacheConfig {
  int num_layers = 0;   // model layers; every layer id is in [0, num_layers)
  int block_size = 16;  // tokens per block
  std::vector<KvCacheGroup> groups;
  int64_t max_model_len = 0;
  int64_t max_chunk_tokens = 0;  // largest prefill chunk (--max-num-batched-tokens); 0: whole
};

// InvalidArgument unless: block size valid, every spec valid, each layer in exactly one
// group as a writer or a reader, every reader's source a writer of the same group.
Status ValidateConfig(const KvCacheConfig& config);

// Arena bytes of one block of group g: PageSizeBytes * writer layers.
int64_t GroupBlockBytes(const KvCacheConfig& config, int group);

struct GroupCapacity {
  int64_t num_blocks = 0;   // including the reserved null block
  int64_t block_bytes = 0;  // arena bytes per block (all writer layers)
  int64_t arena_bytes = 0;  // num_blocks * block_bytes
  int64_t max_blocks_per_request = 0;
  BytesPerToken bytes_per_token;  // all writer layers of the group
};

struct KvCapacity {
  std::vector<GroupCapacity> groups;
  int64_t total_arena_bytes = 0;  // <= budget
  double bytes_per_token = 0;     // sum over groups (sliding groups count every token)
  int64_t num_tokens = 0;         // tokens the non-sliding groups can hold (or sliding if only)
  double max_concurrency = 0;     // requests of max_model_len that fit at once
  std::string formula;            // how max_concurrency was computed
};

// The capacity for a budget. InvalidArgument for a bad config or a budget that cannot hold
// one block per group plus the null blocks. A budget too small for one max-length request is
// not an error here: max_concurrency < 1 tells the caller (the engine refuses to start).
Result<KvCapacity> ComputeCapacity(const KvCacheConfig& config, uint64_t budget_bytes);

// The accounting lines for `kvserve inspect` and the startup log: per group bytes per token
// with the formula and block count, the bytes every token adds (sliding groups' in-window
// bytes shown apart when the model also has growing groups), "KV cache: N tokens",
// "max concurrency at max-model-len L: X".
std::vector<std::string> FormatCapacityReport(const KvCacheConfig& config,
                                              const KvCapacity& capacity);

// ---- flags ----

// --kv-cache-dtype auto|f32|f16|bf16|q8_0|fp8|fp4 for full and sliding groups.
// auto: f32 when the model's activations are f32, else f16 (CPU kvserve keeps f16 as the
// default storage; vLLM's auto = model dtype). fp8 = FP8 E4M3 + E8M0/32, fp4 = FP4 E2M1 +
// E4M3/16 (NVFP4-like).
Result<tensor::DType> ParseKvCacheDType(std::string_view flag, tensor::DType model_dtype);

// --block-size: a power of two in [1, 1024].
Status ValidateBlockSize(int block_size);

// --kv-cache-memory-bytes: "4GiB", "512MiB", "1000000" (core/units.h). Must be > 0.
Result<uint64_t> ParseKvBudget(std::string_view flag);

// The CPU default budget: min(4 GiB, 25% of physical memory).
uint64_t DefaultCpuKvBudgetBytes();
// min(4 GiB, physical / 4), for tests.
uint64_t DefaultCpuKvBudgetBytes(uint64_t physical_bytes);

// "<arch>|f16,f16" style description of every group's formats, for the model fingerprint.
std::string DescribeKvFormats(const KvCacheConfig& config);

}  // namespace kvserve::kv
