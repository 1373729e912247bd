#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/ops.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

// The largest BlockElems of any DType (Q8_0, Q4_0, FP8/FP4 with E8M0 scales: 32).
constexpr int64_t kMaxBlockElems = 32;

// The sequence that owns batch row `row`. note: seqs are contiguous in rows, in order.
const AttentionSequence& SequenceOfRow(std::span<const AttentionSequence> seqs, int64_t row) {
  auto it = std::upper_bound(seqs.begin(), seqs.end(), row,
                             [](int64_t r, const AttentionSequence& s) { return r < s.first_row; });
  DCHECK(it != seqs.begin());
  return *(it - 1);
}

int64_t TotalRows(std::span<const AttentionSequence> seqs) {
  int64_t rows = 0;
  for (const AttentionSequence& s : seqs) {
    CHECK_EQ(s.first_row, rows) << "sequences must be contiguous and in row order";
    CHECK_GE(s.start_pos, 0);
    rows += s.num_tokens;
  }
  return rows;
}

// Values [first, first + count) of a stored row, dequantized into buf (count + 2 blocks floats).
// Returns a pointer to value `first`. Quantized blocks may span heads, so whole blocks are
// dequantized. Example: head_dim 8, Q8_0 (32 values in 34 B), kv head 5 = values [40, 48):
// block 1 (values 32..63) is dequantized from byte 34, and the head starts at buf + 8.
const float* DequantizeSlice(tensor::DType dtype, const std::byte* row, int64_t first,
                             int64_t count, float* buf) {
  if (dtype == tensor::DType::kF32) return reinterpret_cast<const float*>(row) + first;
  const int64_t block_elems = tensor::BlockElems(dtype);
  DCHECK(block_elems <= kMaxBlockElems);
  const int64_t block_lo = first / block_elems;
  const int64_t block_hi = (first + count + block_elems - 1) / block_elems;
  tensor::DequantizeRow(dtype, row + block_lo * tensor::BlockBytes(dtype), buf,
                        (block_hi - block_lo) * block_elems);
  return buf + (first - block_lo * block_elems);
}

float Dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One (row, kv head) item of PagedAttention: all `group` query heads that share the kv head.
void AttendOne(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
               const AttentionSequence& seq, int64_t row, int kv_head, const float* q, float* out,
               float* scores, float* row_buf, float* acc, int32_t max_context) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const int32_t pos = seq.start_pos + static_cast<int32_t>(row - seq.first_row);
  const int32_t lo = shape.window ? std::max<int32_t>(0, pos - *shape.window + 1) : 0;
  const int32_t n = pos - lo + 1;
  CHECK_LT(pos, max_context) << "attention scratch too small";
  CHECK_LT(static_cast<size_t>(pos / kv.block_size), seq.block_table.size())
      << "block table does not cover position " << pos;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * hd;
  const float* q_row = q + row * q_stride + static_cast<int64_t>(kv_head) * group * hd;
  const int64_t slice_first = static_cast<int64_t>(kv_head) * hd;

  // Scores: scores[g * max_context + (j - lo)] = scale * q_g . k_j.
  for (int32_t j = lo; j <= pos; ++j) {
    const int32_t block = seq.block_table[j / kv.block_size];
    const std::byte* k_row = kv.KRow(layer, block, j % kv.block_size);
    const float* k = DequantizeSlice(kv.dtype, k_row, slice_first, hd, row_buf);
    for (int g = 0; g < group; ++g) {
      scores[static_cast<int64_t>(g) * max_context + (j - lo)] =
          shape.scale * Dot(q_row + static_cast<int64_t>(g) * hd, k, hd);
    }
  }
  for (int g = 0; g < group; ++g) Softmax(scores + static_cast<int64_t>(g) * max_context, n);

  // Weighted sum of V rows, positions in increasing order.
  std::fill(acc, acc + static_cast<int64_t>(group) * hd, 0.0f);
  for (int32_t j = lo; j <= pos; ++j) {
    const int32_t block = seq.block_table[j / kv.block_size];
    const std::byte* v_row = kv.VRow(layer, block, j % kv.block_size);
    const float* v = DequantizeSlice(kv.dtype, v_row, slice_first, hd, row_buf);
    for (int g = 0; g < group; ++g) {
      const float p = scores[static_cast<int64_t>(g) * max_context + (j - lo)];
      float* a = acc + static_cast<int64_t>(g) * hd;
      for (int d = 0; d < hd; ++d) a[d] += p * v[d];
    }
  }
  std::memcpy(out + row * q_stride + static_cast<int64_t>(kv_head) * group * hd, acc,
              sizeof(float) * group * hd);
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens,
                                   int num_threads)
    : max_context_tokens_(max_context_tokens), num_threads_(num_threads) {
  CHECK_GT(shape.num_kv_heads, 0);
  CHECK_EQ(shape.num_heads % shape.num_kv_heads, 0);
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  scores_per_thread_ = group * max_context_tokens;
  row_per_thread_ = shape.head_dim + 2 * kMaxBlockElems;
  acc_per_thread_ = group * shape.head_dim;
  scores_.assign(scores_per_thread_ * num_threads, 0.0f);
  row_.assign(row_per_thread_ * num_threads, 0.0f);
  acc_.assign(acc_per_thread_ * num_threads, 0.0f);
}

void WriteKv(const tensor::PagedKvView& kv, int layer, std::span<const AttentionSequence> seqs,
             const float* k, const float* v, ThreadPool& pool) {
  const int64_t rows = TotalRows(seqs);
  pool.ParallelFor(static_cast<size_t>(rows), [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) {
      const AttentionSequence& seq = SequenceOfRow(seqs, static_cast<int64_t>(r));
      const int32_t pos = seq.start_pos + static_cast<int32_t>(r - seq.first_row);
      CHECK_LT(static_cast<size_t>(pos / kv.block_size), seq.block_table.size())
          << "block table does not cover position " << pos;
      const int32_t block = seq.block_table[pos / kv.block_size];
      const int slot = pos % kv.block_size;
      const int64_t offset = static_cast<int64_t>(r) * kv.row_elems;
      tensor::QuantizeRow(kv.dtype, k + offset, kv.KRow(layer, block, slot), kv.row_elems);
      tensor::QuantizeRow(kv.dtype, v + offset, kv.VRow(layer, block, slot), kv.row_elems);
    }
  });
}

void PagedAttention(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
                    std::span<const AttentionSequence> seqs, const float* q, float* out,
                    ThreadPool& pool, AttentionScratch& scratch) {
  CHECK_EQ(kv.row_elems, shape.num_kv_heads * shape.head_dim);
  CHECK_EQ(shape.num_heads % shape.num_kv_heads, 0);
  CHECK_GE(scratch.num_threads(), pool.num_threads());
  CHECK(!shape.window || *shape.window > 0) << "window must be positive";
  const int64_t rows = TotalRows(seqs);
  const size_t items = static_cast<size_t>(rows) * shape.num_kv_heads;
  pool.ParallelFor(items, [&](size_t begin, size_t end, int thread) {
    for (size_t item = begin; item < end; ++item) {
      const int64_t row = static_cast<int64_t>(item / shape.num_kv_heads);
      const int kv_head = static_cast<int>(item % shape.num_kv_heads);
      AttendOne(shape, kv, layer, SequenceOfRow(seqs, row), row, kv_head, q, out,
                scratch.Scores(thread), scratch.Row(thread), scratch.Acc(thread),
                scratch.max_context_tokens());
    }
  });
}

}  // namespace kvserve::kernels
