#include "kv/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/check.h"

namespace kvserve::kv {

void KvArena::FreeDeleter::operator()(std::byte* p) const {
  std::free(p);
}

KvArena::KvArena(int64_t block_bytes, int64_t num_blocks, bool allocate_memory)
    : block_bytes_(block_bytes), num_blocks_(num_blocks) {
  CHECK_GT(block_bytes, 0);
  CHECK_GT(num_blocks, 0);
  if (!allocate_memory) return;
  const size_t bytes = static_cast<size_t>(block_bytes) * static_cast<size_t>(num_blocks);
  // Arenas of a huge page or more start on one and ask for transparent huge pages: a block's
  // first write (a prefill, a tier load) then faults once per 2 MiB, not once per 4 KiB.
  const size_t alignment = bytes >= kHugePage ? kHugePage : kAlignment;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  data_.reset(static_cast<std::byte*>(std::aligned_alloc(alignment, rounded)));
  CHECK(data_ != nullptr) << "KV arena allocation of " << rounded << " bytes failed";
  if (alignment == kHugePage) ::madvise(data_.get(), rounded, MADV_HUGEPAGE);  // a hint
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Faults in [begin, begin + bytes) for writing. The pages are the arena's own (not yet shared
// with any reader), so the fallback's zero writes change nothing that was defined.
void PopulateRange(std::byte* begin, size_t bytes) {
  if (::madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return;
  constexpr size_t kPage = 4096;
  auto* p = reinterpret_cast<volatile std::byte*>(begin);
  for (size_t off = 0; off < bytes; off += kPage) p[off] = std::byte{0};
  if (bytes > 0) p[bytes - 1] = std::byte{0};  // the last page, when begin is not page-aligned
}

}  // namespace

void KvArena::PrefaultBlocks(int64_t count, int threads) {
  if (data_ == nullptr || count <= 0) return;
  const size_t bytes =
      static_cast<size_t>(block_bytes_) * static_cast<size_t>(std::min(count, num_blocks_));
  // Slices of whole huge pages (madvise ranges must start on a page boundary).
  const size_t unit = bytes >= kHugePage ? kHugePage : 4096;
  const size_t units = (bytes + unit - 1) / unit;
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, units);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < n; ++t) {
    const size_t begin = units * t / n * unit;
    const size_t end = std::min(bytes, units * (t + 1) / n * unit);
    if (end <= begin) continue;
    workers.emplace_back([this, begin, end] { PopulateRange(data_.get() + begin, end - begin); });
  }
  for (std::thread& w : workers) w.join();
}

std::byte* KvArena::BlockData(BlockId id) const {
  CHECK(data_ != nullptr) << "arena has no memory";
  CHECK(id >= 0 && id < num_blocks_) << "block " << id;
  return data_.get() + static_cast<size_t>(id) * static_cast<size_t>(block_bytes_);
}

tensor::PagedKvView MakeKvView(const KvCacheConfig& config, int group, const KvArena& arena) {
  const KvCacheGroup& g = config.groups.at(group);
  const bool is_full = std::holds_alternative<FullAttention>(g.spec);
  CHECK(is_full || std::holds_alternative<SlidingWindow>(g.spec)) << "latent group";
  const auto [heads, dim, dtype, shared] =
      is_full ? std::tuple(std::get<FullAttention>(g.spec).num_kv_heads,
                           std::get<FullAttention>(g.spec).head_dim,
                           std::get<FullAttention>(g.spec).dtype,
                           std::get<FullAttention>(g.spec).shared_kv)
              : std::tuple(std::get<SlidingWindow>(g.spec).num_kv_heads,
                           std::get<SlidingWindow>(g.spec).head_dim,
                           std::get<SlidingWindow>(g.spec).dtype,
                           std::get<SlidingWindow>(g.spec).shared_kv);
  tensor::PagedKvView view =
      tensor::MakePagedKvView(config.num_layers, heads, dim, dtype, config.block_size);
  const size_t row_bytes = static_cast<size_t>(tensor::RowBytes(dtype, int64_t{heads} * dim));
  const size_t layer_page = static_cast<size_t>(PageSizeBytes(g.spec, config.block_size));
  std::byte* base = arena.data();
  CHECK(base != nullptr) << "arena has no memory";
  for (size_t i = 0; i < g.layers.size(); ++i) {
    tensor::PagedKvLayer& l = view.layers[g.layers[i]];
    l.k_base = base + i * layer_page;
    l.v_base = shared ? l.k_base : l.k_base + config.block_size * row_bytes;
    l.block_stride_bytes = static_cast<size_t>(arena.block_bytes());
  }
  for (const KvReader& r : g.readers) view.layers[r.layer] = view.layers[r.source_layer];
  return view;
}

tensor::PagedLatentView MakeLatentView(const KvCacheConfig& config, int group,
                                       const KvArena& arena) {
  const KvCacheGroup& g = config.groups.at(group);
  const auto* spec = std::get_if<CompressedLatent>(&g.spec);
  CHECK(spec != nullptr) << "not a latent group";
  tensor::PagedLatentView view;
  view.block_size = config.block_size;
  view.compress_ratio = spec->compress_ratio;
  view.latent_dtype = spec->latent_dtype;
  view.latent_elems = spec->latent_dim;
  view.index_dtype = spec->index_dtype;
  view.index_elems = spec->index_key_dim;
  view.layers.resize(config.num_layers);
  const size_t entries = static_cast<size_t>(EntriesPerBlock(*spec, config.block_size));
  const size_t latent_row =
      static_cast<size_t>(tensor::RowBytes(spec->latent_dtype, spec->latent_dim));
  const size_t index_row =
      spec->index_key_dim > 0
          ? static_cast<size_t>(tensor::RowBytes(spec->index_dtype, spec->index_key_dim))
          : 0;
  const size_t layer_page = static_cast<size_t>(PageSizeBytes(g.spec, config.block_size));
  std::byte* base = arena.data();
  CHECK(base != nullptr) << "arena has no memory";
  for (size_t i = 0; i < g.layers.size(); ++i) {
    tensor::PagedLatentLayer& l = view.layers[g.layers[i]];
    l.latent_base = base + i * layer_page;
    l.index_base = index_row > 0 ? l.latent_base + entries * latent_row : nullptr;
    l.block_stride_bytes = static_cast<size_t>(arena.block_bytes());
    l.latent_stride_bytes = latent_row;
    l.index_stride_bytes = index_row;
  }
  for (const KvReader& r : g.readers) view.layers[r.layer] = view.layers[r.source_layer];
  return view;
}

}  // namespace kvserve::kv
