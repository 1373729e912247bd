#include "kernels/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/attention_exp.h"
#include "tensor/quant.h"

namespace kvserve::kernels::testing {
namespace {

constexpr int kLanes = 16;
constexpr int kChunk = AttentionScratch::kKeyChunk;
constexpr int kPartition = AttentionScratch::kPartition;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct State {
  float m = kNegInf;
  float lsum[kLanes] = {};
  std::vector<float> acc;
};

float TreeSum(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// Head `kv_head` of the K (or V) row at `pos`, zero-padded to `padded` values.
std::vector<float> HeadOf(const tensor::PagedKvView& kv, int layer, bool key,
                          std::span<const int32_t> table, int32_t pos, int kv_head, int hd,
                          int padded) {
  std::vector<float> row(kv.row_elems);
  const int32_t block = table[pos / kv.block_size];
  for (int g = 0; g < kv.num_segments(); ++g) {
    const std::byte* src = key ? kv.KSegment(layer, block, pos % kv.block_size, g)
                               : kv.VSegment(layer, block, pos % kv.block_size, g);
    tensor::DequantizeRow(kv.dtype, src, row.data() + g * kv.segment_elems, kv.segment_elems);
  }
  std::vector<float> head(padded, 0.0f);
  std::copy_n(row.begin() + int64_t{kv_head} * hd, hd, head.begin());
  return head;
}

float Dot(const std::vector<float>& q, const std::vector<float>& k) {
  float lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = q[l] * k[l];
  for (size_t c = kLanes; c < q.size(); c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = std::fma(q[c + l], k[c + l], lanes[l]);
  }
  return TreeSum(lanes);
}

void Fold(State& total, const State& part) {
  const float m = std::max(total.m, part.m);
  const float a = AttentionExp(total.m - m);
  const float b = AttentionExp(part.m - m);
  for (size_t d = 0; d < total.acc.size(); ++d) {
    total.acc[d] = std::fma(part.acc[d], b, total.acc[d] * a);
  }
  for (int l = 0; l < kLanes; ++l) total.lsum[l] = std::fma(part.lsum[l], b, total.lsum[l] * a);
  total.m = m;
}

}  // namespace

std::vector<float> ReferenceAttention(const AttentionShape& shape, const tensor::PagedKvView& kv,
                                      int layer, std::span<const int32_t> table, int32_t pos,
                                      int head, const float* q) {
  const int hd = shape.head_dim;
  const int padded = (hd + 15) / 16 * 16;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int32_t lo = shape.window ? std::max(0, pos - *shape.window + 1) : 0;
  std::vector<float> query(padded, 0.0f);
  std::copy_n(q, hd, query.begin());
  State total;
  total.acc.assign(padded, 0.0f);
  for (int32_t part = lo / kPartition; part <= pos / kPartition; ++part) {
    State state;
    state.acc.assign(padded, 0.0f);
    const int32_t part_lo = std::max(lo, part * kPartition);
    const int32_t part_hi = std::min(pos + 1, (part + 1) * kPartition);
    for (int32_t c0 = part_lo / kChunk * kChunk; c0 < part_hi; c0 += kChunk) {
      const int32_t a = std::max(c0, part_lo);
      const int32_t b = std::min(c0 + kChunk, part_hi);
      float s[kChunk];
      std::vector<std::vector<float>> values(kChunk);
      float chunk_max = kNegInf;
      for (int32_t j = a; j < b; ++j) {
        s[j - c0] = shape.scale * Dot(query, HeadOf(kv, layer, true, table, j, kv_head, hd, padded));
        values[j - c0] = HeadOf(kv, layer, false, table, j, kv_head, hd, padded);
        chunk_max = std::max(chunk_max, s[j - c0]);
      }
      const float m = std::max(state.m, chunk_max);
      const float alpha = m == state.m ? 1.0f : AttentionExp(state.m - m);
      float p[kChunk];
      for (int l = 0; l < kChunk; ++l) {
        p[l] = c0 + l >= a && c0 + l < b ? AttentionExp(s[l] - m) : 0.0f;
        state.lsum[l] = std::fma(state.lsum[l], alpha, p[l]);
      }
      for (float& x : state.acc) x = alpha == 1.0f ? x : x * alpha;
      for (int32_t j = a; j < b; ++j) {
        for (int d = 0; d < padded; ++d) {
          state.acc[d] = std::fma(p[j - c0], values[j - c0][d], state.acc[d]);
        }
      }
      state.m = m;
    }
    if (state.m != kNegInf) Fold(total, state);
  }
  float sum = TreeSum(total.lsum);
  float inv = 1.0f / sum;
  if (shape.sinks != nullptr) {  // the sink: one more denominator term, without a value
    const float sink = shape.sinks[head];
    const float top = std::max(total.m, sink);
    const float a = AttentionExp(total.m - top);
    sum = std::fma(sum, a, AttentionExp(sink - top));
    inv = a / sum;
  }
  std::vector<float> out(hd);
  for (int d = 0; d < hd; ++d) out[d] = total.acc[d] * inv;
  return out;
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

ScatteredBatch MakeScatteredBatch(
    std::mt19937& rng, int block_size, std::span<const std::pair<int32_t, int32_t>> spec,
    const std::function<void(std::span<const int32_t> table, int32_t pos)>& fill) {
  ScatteredBatch batch;
  int32_t blocks = 0;
  for (auto [start, count] : spec) blocks += (start + count + block_size - 1) / block_size;
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  batch.tables.resize(spec.size());
  for (size_t s = 0; s < spec.size(); ++s) {
    const auto [start, count] = spec[s];
    const int32_t nb = (start + count + block_size - 1) / block_size;
    batch.tables[s].assign(ids.begin() + next, ids.begin() + next + nb);
    next += nb;
    for (int32_t p = 0; p < start; ++p) fill(batch.tables[s], p);
    batch.seqs.push_back({batch.rows, count, start, batch.tables[s]});
    batch.rows += count;
  }
  return batch;
}

}  // namespace kvserve::kernels::testing
