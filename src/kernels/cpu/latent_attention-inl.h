// Per-target hybrid window + latent attention (re-included once per Highway target by
// latent_attention.cc): a query row's list of rows, then every head's online softmax over it
// with the chunk step of attention-inl.h.
#if defined(KVSERVE_KERNELS_CPU_LATENT_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_LATENT_ATTENTION_INL_H_
#undef KVSERVE_KERNELS_CPU_LATENT_ATTENTION_INL_H_
#else
#define KVSERVE_KERNELS_CPU_LATENT_ATTENTION_INL_H_
#endif

#include "kernels/cpu/attention-inl.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/latent_attention.h"

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {

// Row i of seq: gathers L(p) (latent_attention.h) into t.rows, then runs every head over it.
HWY_INLINE void AttendHybridRow(const internal::HybridCall& c, const HybridSequence& seq, int32_t i,
                                HybridAttentionScratch::Thread& t) {
  const HybridAttentionShape& s = *c.shape;
  const tensor::PagedKvView& window = *c.window;
  const int32_t p = seq.start_pos + i;
  const int64_t row = seq.first_row + i;
  const int d = s.head_dim;
  int n = 0;
  for (int32_t pos = std::max(0, p - s.window + 1); pos <= p; ++pos, ++n) {
    const int32_t block = seq.window_table[pos / window.block_size];
    ConvertHeadSlice(window.dtype,
                     reinterpret_cast<const uint8_t*>(
                         window.KSegment(c.window_slot, block, pos % window.block_size, 0)),
                     d, t.rows.data() + static_cast<int64_t>(n) * d);
  }
  if (s.ratio > 0) {
    const int32_t visible = (p + 1) / s.ratio;
    const int num_selected =
        SelectEntries(s, *c.latent, c.latent_slot, seq.latent_table, visible,
                      c.q_idx + row * s.index_heads * s.index_dim, c.idx_w + row * s.index_heads,
                      t, t.selected.data());
    for (int k = 0; k < num_selected; ++k, ++n) {
      const std::byte* entry =
          LatentEntry(*c.latent, c.latent_slot, seq.latent_table, t.selected[k], false);
      ConvertHeadSlice(c.latent->latent_dtype, reinterpret_cast<const uint8_t*>(entry), d,
                       t.rows.data() + static_cast<int64_t>(n) * d);
    }
  }
  const int sf = c.scratch->state_floats();
  ResetStates(t.states.data(), s.num_heads, sf, d);
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const float* tile = t.rows.data() + static_cast<int64_t>(c0) * d;
    const int b = std::min(kChunk, n - c0);
    for (int h = 0; h < s.num_heads;) {
      const float* qs[4];
      float* ss[4];
      const int count = std::min(4, s.num_heads - h);
      for (int k = 0; k < count; ++k, ++h) {
        qs[k] = c.q + (row * s.num_heads + h) * d;
        ss[k] = t.states.data() + static_cast<int64_t>(h) * sf;
      }
      switch (count) {
        case 4: UpdateChunks<4>(qs, ss, tile, tile, d, s.scale, 0, b); break;
        case 3: UpdateChunks<3>(qs, ss, tile, tile, d, s.scale, 0, b); break;
        case 2: UpdateChunks<2>(qs, ss, tile, tile, d, s.scale, 0, b); break;
        default: UpdateChunks<1>(qs, ss, tile, tile, d, s.scale, 0, b); break;
      }
    }
  }
  for (int h = 0; h < s.num_heads; ++h) {
    Finalize(t.states.data() + static_cast<int64_t>(h) * sf, d, d,
             c.out + (row * s.num_heads + h) * d);
  }
}

// Batch rows [begin, end) (rows of the sequences in order), on thread `thread`.
void AttendHybridRows(const internal::HybridCall* c, size_t begin, size_t end, int thread) {
  HybridAttentionScratch::Thread& t = c->scratch->thread(thread);
  size_t seq_index = 0;
  int64_t seq_begin = 0;
  int64_t seq_end = c->seqs.empty() ? 0 : c->seqs[0].num_tokens;
  for (size_t r = begin; r < end; ++r) {
    while (static_cast<int64_t>(r) >= seq_end) {
      seq_begin = seq_end;
      seq_end += c->seqs[++seq_index].num_tokens;
    }
    AttendHybridRow(*c, c->seqs[seq_index], static_cast<int32_t>(static_cast<int64_t>(r) - seq_begin),
                    t);
  }
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
