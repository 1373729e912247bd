// Per-target MLA decode (re-included once per Highway target by mla_attention.cc): a step of
// decode rows over F16 latent rows read in place, every query head of a row sharing each
// read of a cached row (mla_attention.h, "Decode rows"). AVX-512 only; other targets run
// PagedAttention (MlaDecodeTarget returns false there).
#if defined(KVSERVE_KERNELS_CPU_MLA_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_MLA_ATTENTION_INL_H_
#undef KVSERVE_KERNELS_CPU_MLA_ATTENTION_INL_H_
#else
#define KVSERVE_KERNELS_CPU_MLA_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <atomic>

#include "kernels/cpu/attention-inl.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/mla_attention_internal.h"

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr bool kMlaDecode = true;

// Requests `bytes` from p into L1 (kHint 0) or L2 (kHint 1): slice `slice` of `slices` of
// its lines (all of them: 0 of 1).
template <int kHint>
HWY_INLINE void PrefetchBytes(const std::byte* p, size_t bytes, int slice = 0, int slices = 1) {
  if (p == nullptr) return;
  const size_t lines = (bytes + 63) / 64;
  const size_t per = (lines + slices - 1) / slices;
  const size_t end = std::min(lines, per * (slice + 1));
  for (size_t l = per * slice; l < end; ++l) {
    PrefetchLine<kHint>(reinterpret_cast<const char*>(p) + 64 * l);
  }
}

// The chunks a thread walks: those of its current sequence, then of the next it claimed.
// Chunk k of sequence s starts at position 16k (one block holds it: block_size % 16 == 0).
struct MlaWalk {
  const internal::MlaCall* c;
  int32_t cur = -1, next = -1;

  int32_t Chunks(int32_t s) const { return c->seqs[s].start_pos / kChunk + 1; }
  // Chunk k of the walk from the current sequence's chunk 0 (null past the claimed ones).
  const std::byte* Chunk(int32_t k, size_t* bytes) const {
    int32_t s = cur;
    if (k >= Chunks(cur)) {
      k -= Chunks(cur);
      s = next;
      if (s < 0 || k >= Chunks(s)) return nullptr;
    }
    const AttentionSequence& seq = c->seqs[s];
    const tensor::PagedLatentView& v = *c->latent;
    const int32_t c0 = k * kChunk;
    *bytes = static_cast<size_t>(std::min(kChunk, seq.start_pos + 1 - c0)) * c->row_bytes;
    return v.LatentRow(c->layer, seq.block_table[c0 / v.block_size], c0 % v.block_size);
  }
};

// Chunks requested ahead of the one computed: into L1 and into L2 (10 KiB each at deepseek2
// small's 320 F16 values; without them, or with only the L2 requests, the step ran 10-35%
// longer on AMD Zen 5, docs/PERFORMANCE.md).
constexpr int32_t kMlaNearChunks = 1;
constexpr int32_t kMlaFarChunks = 2;
// Query heads per pass over a chunk (UpdateChunks, attention-inl.h: ScoresTiled's 4 x 4
// tiles, 4 queries and 4 widened rows loaded per 16 FMAs): ran faster than 8 heads in 8 x 2
// tiles (8 + 2 loads), and than a chunk widened once into an f32 tile, though each pass
// widens the rows again (docs/PERFORMANCE.md).
constexpr int kMlaHeadsPerPass = 4;

// Sequence cur of the walk: every head over its rows [0, pos], partition by partition
// (attention.h), kMlaHeadsPerPass heads at a time sharing each widened row vector: the
// operations of PagedAttention's items (attention_item-inl.h) for each query.
HWY_INLINE void MlaDecodeSequence(const internal::MlaCall& c, const MlaWalk& walk, float* part,
                                  float* total) {
  const MlaShape& shape = *c.shape;
  const AttentionSequence& seq = c.seqs[walk.cur];
  const tensor::PagedLatentView& v = *c.latent;
  const int dim = shape.latent_dim();
  const int vd = shape.kv_lora_rank;
  const int sf = dim + 32;  // a state as in attention-inl.h: [acc (dim)][L (16)][m][15]
  const int heads = shape.num_heads;
  const int32_t pos = seq.start_pos;
  const float* q = c.q + seq.first_row * heads * dim;
  ResetStates(total, heads, sf, dim);
  int32_t k = 0;  // chunk of the walk
  const int passes = heads / 4 + heads % 4 / 2 + heads % 2;  // head passes per chunk
  for (int32_t part0 = 0; part0 <= pos; part0 += kPartition) {
    ResetStates(part, heads, sf, dim);
    for (int32_t c0 = part0; c0 <= pos && c0 < part0 + kPartition; c0 += kChunk, ++k) {
      // The next chunks' requests spread over the passes, so that fewer wait for a free
      // miss buffer at once.
      size_t near_bytes = 0, far_bytes = 0;
      const std::byte* near = walk.Chunk(k + kMlaNearChunks, &near_bytes);
      const std::byte* far = walk.Chunk(k + kMlaFarChunks, &far_bytes);
      int pass = 0;
      const auto* rows = reinterpret_cast<const uint16_t*>(
          v.LatentRow(c.layer, seq.block_table[c0 / v.block_size], c0 % v.block_size));
      const int b = std::min(kChunk, pos + 1 - c0);
      for (int h = 0; h < heads;) {
        const float* qs[kMlaHeadsPerPass];
        float* ss[kMlaHeadsPerPass];
        const int n = heads - h >= 4 ? 4 : heads - h >= 2 ? 2 : 1;
        PrefetchBytes<0>(near, near_bytes, pass, passes);
        PrefetchBytes<1>(far, far_bytes, pass++, passes);
        for (int i = 0; i < n; ++i, ++h) {
          qs[i] = q + static_cast<int64_t>(h) * dim;
          ss[i] = part + static_cast<int64_t>(h) * sf;
        }
        switch (n) {
          case 4: UpdateChunks<4>(qs, ss, rows, nullptr, rows, dim, shape.scale, 0, b, 0.0f, vd); break;
          case 2: UpdateChunks<2>(qs, ss, rows, nullptr, rows, dim, shape.scale, 0, b, 0.0f, vd); break;
          default: UpdateChunks<1>(qs, ss, rows, nullptr, rows, dim, shape.scale, 0, b, 0.0f, vd); break;
        }
      }
    }
    for (int h = 0; h < heads; ++h) {
      const float* p = part + static_cast<int64_t>(h) * sf;
      if (p[dim + kLanes] != kNegInf) Merge(total + static_cast<int64_t>(h) * sf, p, dim, vd);
    }
  }
  float* out = c.out + seq.first_row * heads * dim;
  for (int h = 0; h < heads; ++h) {
    Finalize(total + static_cast<int64_t>(h) * sf, vd, dim, out + static_cast<int64_t>(h) * dim);
  }
}
#else
inline constexpr bool kMlaDecode = false;
#endif

// A thread's share of an MLA decode step: claims sequences in order until none is left,
// one ahead so that the next one's first rows are requested while the last ones compute.
void MlaDecodeWorker(internal::MlaCall* c, int thread) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  float* part = c->states + static_cast<int64_t>(thread) * c->states_per_thread;
  float* total = part + c->states_per_thread / 2;
  const int32_t n = static_cast<int32_t>(c->seqs.size());
  auto claim = [&] {
    const int32_t s = c->next.fetch_add(1, std::memory_order_relaxed);
    return s < n ? s : -1;
  };
  MlaWalk walk{c};
  walk.cur = claim();
  if (walk.cur < 0) return;
  walk.next = claim();
  size_t bytes = 0;
  for (int32_t k = 0; k < kMlaFarChunks; ++k) {
    if (const std::byte* p = walk.Chunk(k, &bytes)) PrefetchBytes<1>(p, bytes);
  }
  for (; walk.cur >= 0; walk.cur = walk.next, walk.next = walk.cur >= 0 ? claim() : -1) {
    MlaDecodeSequence(*c, walk, part, total);
  }
#else
  (void)c;
  (void)thread;
  CHECK(false) << "no MLA decode kernel on " << hwy::TargetName(HWY_TARGET);
#endif
}

bool MlaDecodeTarget() { return kMlaDecode; }

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
