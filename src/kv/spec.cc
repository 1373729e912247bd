#include "kv/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "core/check.h"

namespace kvserve::kv {
namespace {

using tensor::DType;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;  // clang before 17 deduces no aggregate templates

int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Rows per token per layer for full / sliding specs.
int RowsPerToken(bool shared_kv) {
  return shared_kv ? 1 : 2;
}

// The row formula of a full / sliding layer for reports:
// plain types: "4 kv heads x 8 dims x 4 B"; block types: "row(q8_0, 4 kv heads x 8 dims) 34 B".
std::string RowFormula(int heads, int dim, DType dtype) {
  if (tensor::BlockElems(dtype) == 1) {
    return fmt::format("{} kv heads x {} dims x {} B", heads, dim, tensor::BlockBytes(dtype));
  }
  return fmt::format("{} B ({} row of {} kv heads x {} dims)",
                     tensor::RowBytes(dtype, int64_t{heads} * dim), tensor::DTypeName(dtype), heads,
                     dim);
}

Status ValidateRow(const char* what, int64_t elems, DType dtype) {
  if (elems <= 0) return InvalidArgument(fmt::format("{}: row length must be positive", what));
  if (!tensor::IsValidRowLength(dtype, elems)) {
    return InvalidArgument(
        fmt::format("{}: a row of {} values is not a whole number of {} "
                    "blocks ({} values each)",
                    what, elems, tensor::DTypeName(dtype), tensor::BlockElems(dtype)));
  }
  return Status::Ok();
}

}  // namespace

const char* SpecKindName(const KvLayoutSpec& spec) {
  return std::visit(Overloaded{
                        [](const FullAttention&) { return "full_attention"; },
                        [](const SlidingWindow&) { return "sliding_window"; },
                        [](const CompressedLatent&) { return "compressed_latent"; },
                    },
                    spec);
}

std::string DescribeSpec(const KvLayoutSpec& spec) {
  return std::visit(
      Overloaded{
          [](const FullAttention& s) {
            return fmt::format("full_attention(kv_heads={},head_dim={},dtype={},shared_kv={})",
                               s.num_kv_heads, s.head_dim, tensor::DTypeName(s.dtype),
                               s.shared_kv ? 1 : 0);
          },
          [](const SlidingWindow& s) {
            return fmt::format(
                "sliding_window(window={},kv_heads={},head_dim={},dtype={},shared_kv={})", s.window,
                s.num_kv_heads, s.head_dim, tensor::DTypeName(s.dtype), s.shared_kv ? 1 : 0);
          },
          [](const CompressedLatent& s) {
            return fmt::format(
                "compressed_latent(latent_dim={},ratio={},latent_dtype={},index_key_dim={},"
                "index_dtype={})",
                s.latent_dim, s.compress_ratio, tensor::DTypeName(s.latent_dtype), s.index_key_dim,
                tensor::DTypeName(s.index_dtype));
          },
      },
      spec);
}

Status ValidateSpec(const KvLayoutSpec& spec, int block_size) {
  if (block_size <= 0) return InvalidArgument("block size must be positive");
  return std::visit(
      Overloaded{
          [](const FullAttention& s) {
            return ValidateRow("full_attention", int64_t{s.num_kv_heads} * s.head_dim, s.dtype);
          },
          [](const SlidingWindow& s) {
            if (s.window <= 0) return InvalidArgument("sliding_window: window must be positive");
            return ValidateRow("sliding_window", int64_t{s.num_kv_heads} * s.head_dim, s.dtype);
          },
          [block_size](const CompressedLatent& s) {
            if (s.compress_ratio <= 0 || block_size % s.compress_ratio != 0) {
              return InvalidArgument(fmt::format(
                  "compressed_latent: block size {} is not a multiple of compress ratio {}",
                  block_size, s.compress_ratio));
            }
            KV_RETURN_IF_ERROR(ValidateRow("compressed_latent", s.latent_dim, s.latent_dtype));
            if (s.index_key_dim < 0) return InvalidArgument("index_key_dim must be >= 0");
            if (s.index_key_dim == 0) return Status::Ok();
            return ValidateRow("compressed_latent index key", s.index_key_dim, s.index_dtype);
          },
      },
      spec);
}

int64_t TokenRowBytes(const KvLayoutSpec& spec) {
  if (const auto* f = std::get_if<FullAttention>(&spec)) {
    return RowsPerToken(f->shared_kv) *
           tensor::RowBytes(f->dtype, int64_t{f->num_kv_heads} * f->head_dim);
  }
  const auto* s = std::get_if<SlidingWindow>(&spec);
  CHECK(s != nullptr) << "TokenRowBytes on a latent spec";
  return RowsPerToken(s->shared_kv) *
         tensor::RowBytes(s->dtype, int64_t{s->num_kv_heads} * s->head_dim);
}

int64_t LatentEntryBytes(const CompressedLatent& s) {
  int64_t bytes = tensor::RowBytes(s.latent_dtype, s.latent_dim);
  if (s.index_key_dim > 0) bytes += tensor::RowBytes(s.index_dtype, s.index_key_dim);
  return bytes;
}

int EntriesPerBlock(const CompressedLatent& s, int block_size) {
  CHECK_GT(s.compress_ratio, 0);
  CHECK_EQ(block_size % s.compress_ratio, 0);
  return block_size / s.compress_ratio;
}

int64_t PageSizeBytes(const KvLayoutSpec& spec, int block_size) {
  if (const auto* l = std::get_if<CompressedLatent>(&spec)) {
    return int64_t{EntriesPerBlock(*l, block_size)} * LatentEntryBytes(*l);
  }
  return int64_t{block_size} * TokenRowBytes(spec);
}

int64_t MaxBlocksPerRequest(const KvLayoutSpec& spec, int block_size, int64_t max_model_len,
                            int64_t max_chunk_tokens) {
  CHECK_GT(block_size, 0);
  const int64_t all_blocks = CeilDiv(max_model_len, block_size);
  const auto* s = std::get_if<SlidingWindow>(&spec);
  if (s == nullptr) return all_blocks;
  const int64_t chunk = max_chunk_tokens <= 0 ? max_model_len : max_chunk_tokens;
  const int64_t tokens = std::min<int64_t>(s->window + chunk, max_model_len);
  return std::min(CeilDiv(tokens, block_size) + 1, all_blocks);
}

int64_t MaxMemoryBytes(const KvLayoutSpec& spec, int block_size, int64_t max_model_len,
                       int64_t max_chunk_tokens) {
  return MaxBlocksPerRequest(spec, block_size, max_model_len, max_chunk_tokens) *
         PageSizeBytes(spec, block_size);
}

BytesPerToken ComputeBytesPerToken(const KvLayoutSpec& spec, int num_layers) {
  BytesPerToken out;
  if (const auto* l = std::get_if<CompressedLatent>(&spec)) {
    const int64_t entry = LatentEntryBytes(*l);
    out.bytes = static_cast<double>(num_layers) * static_cast<double>(entry) / l->compress_ratio;
    std::string parts =
        fmt::format("{} B latent ({} x {} dims)", tensor::RowBytes(l->latent_dtype, l->latent_dim),
                    tensor::DTypeName(l->latent_dtype), l->latent_dim);
    if (l->index_key_dim > 0) {
      parts += fmt::format(" + {} B index key ({} x {} dims)",
                           tensor::RowBytes(l->index_dtype, l->index_key_dim),
                           tensor::DTypeName(l->index_dtype), l->index_key_dim);
    }
    out.formula = fmt::format("{} layers x 1/{} entries x ({}) = {:g} B", num_layers,
                              l->compress_ratio, parts, out.bytes);
    return out;
  }
  const bool shared = std::visit(Overloaded{[](const FullAttention& f) { return f.shared_kv; },
                                            [](const SlidingWindow& s) { return s.shared_kv; },
                                            [](const CompressedLatent&) { return false; }},
                                 spec);
  const auto [heads, dim, dtype] = std::visit(
      Overloaded{
          [](const FullAttention& f) { return std::tuple(f.num_kv_heads, f.head_dim, f.dtype); },
          [](const SlidingWindow& s) { return std::tuple(s.num_kv_heads, s.head_dim, s.dtype); },
          [](const CompressedLatent&) { return std::tuple(0, 0, DType::kF32); }},
      spec);
  const int64_t total = int64_t{num_layers} * TokenRowBytes(spec);
  out.bytes = static_cast<double>(total);
  out.formula = fmt::format("{} x {} layers x {} = {} B", shared ? "1 (K=V)" : "2 (K,V)",
                            num_layers, RowFormula(heads, dim, dtype), total);
  return out;
}

}  // namespace kvserve::kv
