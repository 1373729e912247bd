// KV layout specs: how many bytes one layer of one attention kind stores per block of tokens.
//
// The planner, the simulator and the KV manager all call these same functions, so planned and
// allocated bytes cannot diverge (DESIGN.md section 3). Nothing here allocates.
//
// Per layer and per token:
//   FullAttention / SlidingWindow: a K row and a V row of kv_heads * head_dim values each, in
//     `dtype` (one row covers all heads, like tensor/kv_view.h). With shared_kv (MLA-style
//     layers whose K and V are the same latent row) only one row is stored.
//   CompressedLatent: one entry per compress_ratio tokens; an entry is a latent row of
//     latent_dim values in latent_dtype plus, when index_key_dim > 0, an indexer key row of
//     index_key_dim values in index_dtype. Entries are written by the group's source layers;
//     layers that only read them get no allocation (see KvCacheGroup in kv/config.h).
//
// Worked example (stories260K-like, f32): kv_heads 4, head_dim 8, block_size 16:
//   row = 4 * 8 * 4 B = 128 B; page = 16 tokens * 2 rows * 128 B = 4096 B per layer.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "core/status.h"
#include "tensor/dtype.h"

namespace kvserve::kv {

struct FullAttention {
  int num_kv_heads = 0;
  int head_dim = 0;
  tensor::DType dtype = tensor::DType::kF16;
  bool shared_kv = false;  // true: one row per token serves as both K and V
};

struct SlidingWindow {
  int window = 0;  // tokens a query attends to, itself included
  int num_kv_heads = 0;
  int head_dim = 0;
  tensor::DType dtype = tensor::DType::kF16;
  bool shared_kv = false;
};

struct CompressedLatent {
  int latent_dim = 0;
  int compress_ratio = 1;  // tokens per entry; block_size must be a multiple of it
  int index_key_dim = 0;   // 0: no indexer key
  tensor::DType latent_dtype = tensor::DType::kFP4_E2M1_E4M3_16;
  tensor::DType index_dtype = tensor::DType::kFP4_E2M1_E8M0_32;
};

using KvLayoutSpec = std::variant<FullAttention, SlidingWindow, CompressedLatent>;

// "full_attention", "sliding_window", "compressed_latent".
const char* SpecKindName(const KvLayoutSpec& spec);
// One line for logs and fingerprints, e.g. "full_attention(kv_heads=4,head_dim=8,dtype=f32)".
std::string DescribeSpec(const KvLayoutSpec& spec);

// InvalidArgument when a dimension is not positive, a row is not a whole number of dtype
// blocks, or block_size is not a multiple of compress_ratio.
Status ValidateSpec(const KvLayoutSpec& spec, int block_size);

// Bytes of one token's K and V rows (full / sliding) for one layer.
int64_t TokenRowBytes(const KvLayoutSpec& spec);  // note: full/sliding only (CHECKed)
// Bytes of one latent entry (latent row + index key row). note: latent only (CHECKed).
int64_t LatentEntryBytes(const CompressedLatent& spec);
// Latent entries in one block: block_size / compress_ratio (16 / 2 = 8).
int EntriesPerBlock(const CompressedLatent& spec, int block_size);

// Bytes one layer stores for one block of block_size tokens.
//   full/sliding: block_size * rows(2, or 1 with shared_kv) * RowBytes(dtype, heads * dim)
//   latent:       (block_size / compress_ratio) * LatentEntryBytes
int64_t PageSizeBytes(const KvLayoutSpec& spec, int block_size);

// Blocks one request of max_model_len tokens holds at its peak, for one layer.
//   full, latent: ceil(max_model_len / block_size).
//   sliding: while a chunk of up to max_chunk_tokens is computed, the request holds the
//     window before the chunk plus the chunk: tokens = min(window + max_chunk_tokens,
//     max_model_len), blocks = min(ceil(tokens / block_size) + 1, ceil(max_model_len /
//     block_size)) (+1: the window rarely starts on a block boundary).
//   Example: window 128, block 16, chunk 1 (decode), max_model_len 4096:
//     min(ceil(129 / 16) + 1, 256) = 10 blocks.
// max_chunk_tokens <= 0 means "the whole prompt in one step" (= max_model_len).
int64_t MaxBlocksPerRequest(const KvLayoutSpec& spec, int block_size, int64_t max_model_len,
                            int64_t max_chunk_tokens = 0);
// MaxBlocksPerRequest * PageSizeBytes: one layer's peak bytes for one request.
int64_t MaxMemoryBytes(const KvLayoutSpec& spec, int block_size, int64_t max_model_len,
                       int64_t max_chunk_tokens = 0);

// Bytes per token for `num_layers` layers of this spec, with the formula spelled out.
struct BytesPerToken {
  double bytes = 0;     // exact for full/sliding; latent may be fractional (ratio > 1)
  std::string formula;  // "2 (K,V) x 5 layers x 4 kv heads x 8 dims x 4 B = 1280 B"
};
BytesPerToken ComputeBytesPerToken(const KvLayoutSpec& spec, int num_layers);

}  // namespace kvserve::kv
