// AMX int8 tiles for one group of 16 tokens (a batched decode step's 16 sequences) and Q8_0
// weights (Q4_K: matmul_x86_amx16k-inl.h, Q6_K: matmul_x86_amx16q6-inl.h), and AmxRows, the AMX
// entry point of every integer format. Textually included by matmul_x86_quant-inl.h after
// matmul_x86_amx-inl.h (the K formats' tiles, fill and f32 chain), matmul_x86_amx32-inl.h (the
// 32-value formats' pipeline) and the one-group pipelines of Q4_K and Q6_K, AVX3_DL target only;
// see matmul.h for the scheme.

// Q8_0 with one group of 16 tokens: AmxRows32 packs each 16-row tile's weights into the B
// layout (dword gathers) for 16 tokens to share, which cost 2x the tile multiplies (measured:
// 16% of gpt-oss small's 16-sequence step). Here the weights are the A operand, read in place:
// block b of 16 rows is 16 runs of 32 int8 values, row_bytes apart in the file, one tile load;
// B is the group's codes of block b (TokenGroups' q: one 512-byte run), C = I_b [16 rows][16
// tokens]. The pipeline over four C tiles is AmxTokenTile's (stage s multiplies block s, drains
// block s - 2 and runs the f32 chain of block s - 3), with a row's 16 tokens in the lanes of
// one accumulator: acc_r = fma(d_r * dx, float(I_b[r]), acc_r), the scheme's product and chain.

// The calling thread's buffer of 16 rows of row_bytes, the rows past a short tile's zero.
HWY_INLINE uint8_t* AmxPaddedRows(int64_t row_bytes) {
  thread_local std::vector<uint8_t> buffer;
  buffer.assign(static_cast<size_t>(16 * row_bytes), 0);
  return buffer.data();
}

// out[r] = accumulator r.
template <size_t... kR>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStoreRows(AmxAcc16& acc, float (*out)[16],
                                                std::index_sequence<kR...>) {
  (_mm512_store_ps(out[kR], acc.Get<kR>()), ...);
}

// Block b's weight factors of the 16 rows (f16 widened exactly) into dw.
KVSERVE_MATMUL_AMX HWY_INLINE void AmxQ8RowFactors(const uint8_t* row0, __m512i offsets,
                                                   int64_t b, float* dw) {
  const __m512i words = _mm512_i32gather_epi32(offsets, row0 + 34 * b, 1);
  _mm512_store_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
}

// The f32 chain of block b for the 16 rows: dx the group's 16 block scales, c block b's C.
template <size_t... kR>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinishRowsQ8(const int32_t* c, const float* dw, __m512 dx,
                                                   AmxAcc16& acc, std::index_sequence<kR...>) {
  ((acc.Get<kR>() = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[kR]), dx),
                                    _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * kR)),
                                    acc.Get<kR>())),
   ...);
}

// What one 16-row tile's Q8_0 pipeline reads.
struct AmxQ8Tile16 {
  const uint8_t* row0;
  int64_t row_bytes, blocks;
  __m512i offsets;  // row i at i * row_bytes
  const uint8_t* q;
  const float* dx;
  int32_t (*c)[256];  // four blocks' C
  float (*dw)[16];    // four blocks' row factors
};

// Asks for the lines of block s of the next tile's 16 rows (its last byte's line; block 0
// also its first), so the next tile streams in while this one computes: the tile loads read 16
// rows at a time, which the hardware prefetchers follow poorly (measured: two thirds of this
// path's time waited on its tile loads without it). Past the matrix's end it only wastes hints.
HWY_INLINE void AmxQ8PrefetchNextTile(const AmxQ8Tile16& t, int64_t s) {
  const uint8_t* next = t.row0 + 16 * t.row_bytes + 34 * s;
  for (int i = 0; i < 16; ++i) {
    if (s == 0) _mm_prefetch(reinterpret_cast<const char*>(next + i * t.row_bytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next + i * t.row_bytes + 33), _MM_HINT_T0);
  }
}

// Stage s of the pipeline (kSet = s % 4).
template <int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStageQ8(const AmxQ8Tile16& t, int64_t s, AmxAcc16& acc) {
  if (s < t.blocks) {
    AmxQ8PrefetchNextTile(t, s);
    AmxIssue32<kSet>(reinterpret_cast<const int8_t*>(t.row0 + 34 * s + 2), t.row_bytes,
                     reinterpret_cast<const int8_t*>(t.q + 512 * s));
    AmxQ8RowFactors(t.row0, t.offsets, s, t.dw[kSet]);
  }
  if (s >= 2 && s - 2 < t.blocks) AmxDrain32<(kSet + 2) % 4>(t.c[(s - 2) & 3]);
  if (s >= 3 && s - 3 < t.blocks) {
    AmxFinishRowsQ8(t.c[(s - 3) & 3], t.dw[(s - 3) & 3], _mm512_loadu_ps(t.dx + 16 * (s - 3)),
                    acc, std::make_index_sequence<16>{});
  }
}

// Rows [row_begin, row_end) x tokens [0, n), n <= 16, of Q8_0 by the pipeline above; a last
// tile of fewer than 16 rows runs from a zero-padded copy (a tile load reads all 16 rows). The
// calling thread's tile state is configured here and released at the end.
KVSERVE_MATMUL_AMX inline void AmxRowsQ8_0x16(const WeightMatrix& w,
                                              const internal::QuantActivations& act, int64_t n,
                                              float* y, int64_t row_begin, int64_t row_end) {
  const int64_t cols = w.cols, blocks = cols / 32;
  const int64_t row_bytes = tensor::RowBytes(tensor::DType::kQ8_0, cols);
  const internal::TokenGroups layout{cols, 32, 1};
  const auto* base = static_cast<const uint8_t*>(w.data);
  alignas(64) int32_t c[4][256];
  alignas(64) float dw[4][16];
  alignas(64) float out[16][16];
  const __m512i offsets = _mm512_mullo_epi32(
      _mm512_set1_epi32(static_cast<int32_t>(row_bytes)),
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  AmxQ8Tile16 t{nullptr, row_bytes, blocks, offsets, act.staging + layout.QOffset(0),
                reinterpret_cast<const float*>(act.staging + layout.DOffset(0)), c, dw};
  AmxConfigure32();
  AmxZeroCTiles();
  for (int64_t r = row_begin; r < row_end; r += 16) {
    const int num_rows = static_cast<int>(std::min<int64_t>(16, row_end - r));
    t.row0 = base + r * row_bytes;
    if (num_rows < 16) {
      uint8_t* padded = AmxPaddedRows(row_bytes);
      std::memcpy(padded, t.row0, static_cast<size_t>(num_rows * row_bytes));
      t.row0 = padded;
    }
    const __m512 zero = _mm512_setzero_ps();
    AmxAcc16 acc{zero, zero, zero, zero, zero, zero, zero, zero,
                 zero, zero, zero, zero, zero, zero, zero, zero};
    for (int64_t s = 0; s < blocks + 3; s += 4) {
      AmxStageQ8<0>(t, s, acc);
      AmxStageQ8<1>(t, s + 1, acc);
      AmxStageQ8<2>(t, s + 2, acc);
      AmxStageQ8<3>(t, s + 3, acc);
    }
    AmxStoreRows(acc, out, std::make_index_sequence<16>{});
    AmxStoreByToken(out, y + r, w.rows, 0, n, num_rows);
  }
  _tile_release();
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) (t_begin a multiple of 16) of n by AMX
// tiles: AmxRows32 for the 32-value formats, AmxRowsK for the K formats; one group of 16 tokens
// of Q4_K runs AmxRowsQ4K16, of Q6_K AmxRowsQ6K16, of Q8_0 AmxRowsQ8_0x16 (MatMul prepares its
// token groups: internal::AmxQ8WeightsAsA).
template <tensor::DType kType>
KVSERVE_MATMUL_AMX void AmxRows(const WeightMatrix& w, const internal::QuantActivations& act,
                                int64_t n, float* y, int64_t row_begin, int64_t row_end,
                                int64_t t_begin, int64_t t_end) {
  if constexpr (kType == tensor::DType::kQ4_K) {
    if (t_begin == 0 && t_end <= 16) return AmxRowsQ4K16(w, act, n, y, row_begin, row_end);
  }
  if constexpr (kType == tensor::DType::kQ6_K) {
    if (t_begin == 0 && t_end <= 16) return AmxRowsQ6K16(w, act, n, y, row_begin, row_end);
  }
  if constexpr (kType == tensor::DType::kQ8_0) {
    if (internal::AmxQ8WeightsAsA(kType, n)) {
      return AmxRowsQ8_0x16(w, act, n, y, row_begin, row_end);
    }
  }
  if constexpr (QuantTraits<kType>::kK) {
    AmxRowsK<kType>(w, act, n, y, row_begin, row_end, t_begin, t_end);
  } else {
    AmxRows32<kType>(w, act, y, row_begin, row_end, t_begin, t_end);
  }
}
