// AMX int8 tiles for one group of 16 tokens and Q4_K weights by sub-block: AmxRowsQ4K16.
// Textually included by matmul_x86_quant-inl.h after matmul_x86_amx-inl.h and
// matmul_x86_amx32-inl.h (AmxConfigure32's tile shapes), AVX3_DL target only; see matmul.h for
// the scheme.
//
// The scheme's I_b = sum_j s_j sum_{i in j} q_i a_i, with the sub-block scales s_j applied
// outside the tiles: A holds the bare 4-bit values q (u8, 0..15) of one 32-value sub-block (a
// tile of K = 32; Q4_K's sub-block j is the low (j even) or high (j odd) nibbles of the 32
// bytes qs[32 (j / 2) ..], so the fill is two ands and a shift per 64 bytes, no multiply, one
// part), B the group's codes of the sub-block (8 rows of TokenGroups' q), and C_j = sum_{i in
// j} q_i a_i [16 rows][16 tokens] by tdpbusd. Then, per row and token, in f32:
//   F = s_0 C_0 + s_1 C_1 + s_2 C_2 + s_3 C_3,   G = s_4 C_4 + ... + s_7 C_7,   I = F + G
// (a multiply and three fmas each). Every term and partial sum is an integer below 2^24 in
// magnitude (|C_j| <= 32 * 15 * 127 = 60960, s_j <= 63: |F|, |G| <= 15,361,920 < 16,777,216),
// so F and G are exact, and F + G, one correctly rounded addition of the exact I_b, is
// float(I_b): the scheme's integer, rounded as the other paths round it. The f32 chain of the
// scheme follows unchanged (the mins M_b by vpdpwssd pairs, as AmxFinishBlockK forms them).
//
// Against the two-part tiles of AmxRowsK (the scaled values split into bytes by 16-bit
// multiplies and byte permutes: about 50 vector instructions per row and block), the fill is
// about 17 and the combine about 26; the price is eight C tiles stored per block instead of two
// (a tile multiply costs about the same at K = 32 as at K = 64). Measured in docs/PERFORMANCE.md.
//
// Pipeline over the units u (block b of row tile T, u = T * blocks + b: it runs on across row
// tiles, so a row of one or two blocks still overlaps), stage u: multiply unit u by pairs of
// sub-blocks, each pair's C stored to memory after the next pair is issued (a tile store waits
// for its multiplies); between the pairs, fill a quarter of the rows of unit u + 2 and combine a
// quarter of unit u - 1. The tile loads read nibbles stored two stages earlier, the combine C
// stored a stage earlier. (Measured: the tile work still overlaps the vector work only in part;
// running it as one piece per block, or the combine two stages behind, was slower.) Tiles:
// AmxConfigure32's (C tmm0-3 16 x 16 int32, A tmm4-5 16 rows x 32 bytes, B tmm6-7 8 rows x 64).

// Everything the Q4_K pipeline reads and writes; per-unit buffers are indexed by u % 3 (the
// nibbles), u % 2 (C) or u % 4 (the rest).
struct AmxQ4KStream {
  const uint8_t* base;  // row row_begin
  int64_t row_bytes, blocks, rows, units;  // rows from row_begin
  const uint8_t* q;     // the group's codes (TokenGroups' q layout)
  const float* dx;      // the group's block scales [b][16 tokens]
  const int32_t* sums;  // the group's code sums (TokenGroups' sums layout)
  alignas(64) uint8_t nibbles[3][16][256];  // row r: lo(qs[0, 64)), hi(..), lo(qs[64, 128)), hi
  alignas(64) int32_t c[2][8][256];         // C_j [16 rows][16 tokens]
  alignas(64) float scales[4][16][8];       // s_j of row r as floats
  alignas(64) int32_t mins[4][16][4];       // min pairs m_{2p} | m_{2p+1} << 16 of row r
  alignas(64) float d[4][16], dmin[4][16];  // the file's d and dmin of row r
  alignas(64) float acc[16][16];            // [16 rows][16 tokens] of the unit's row tile
};

// Where sub-block j's 32 values sit in a row of AmxQ4KStream::nibbles.
constexpr int AmxQ4KSubOffset(int j) { return 128 * (j / 4) + 64 * (j % 2) + 32 * (j / 2 % 2); }

// Where unit u of a one-group stream is: block b of row tile `tile` (the streams' loops step it
// along, so a stage divides nothing).
struct AmxUnit {
  int64_t u, tile, b;
};

// The unit after `at` in a stream of rows of `blocks` blocks.
HWY_INLINE AmxUnit AmxNextUnit(const AmxUnit& at, int64_t blocks) {
  return at.b + 1 < blocks ? AmxUnit{at.u + 1, at.tile, at.b + 1} : AmxUnit{at.u + 1, at.tile + 1, 0};
}

// Fills rows [i0, i0 + 4) of unit `at`: nibbles, scales, mins, d, dmin; rows past the matrix's
// get zeros.
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFillQ4K(AmxQ4KStream& s, const AmxUnit& at, int i0) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const int64_t tile = at.tile, b = at.b;
  uint8_t (*nib)[256] = s.nibbles[at.u % 3];
  const int k = static_cast<int>(at.u & 3);
  for (int i = i0; i < i0 + 4; ++i) {
    const int64_t row = 16 * tile + i;
    if (row >= s.rows) {
      std::memset(nib[i], 0, 256);
      std::memset(s.scales[k][i], 0, sizeof(s.scales[k][i]));
      std::memset(s.mins[k][i], 0, sizeof(s.mins[k][i]));
      s.d[k][i] = s.dmin[k][i] = 0.0f;
      continue;
    }
    const uint8_t* p = s.base + row * s.row_bytes + 144 * b;  // d, dmin, scales[12], qs[128]
    AmxPrefetchNextTile<3>(p, s.row_bytes);
    int32_t halves;  // d, dmin
    std::memcpy(&halves, p, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(halves));
    _mm_store_ss(&s.d[k][i], dd);
    _mm_store_ss(&s.dmin[k][i], _mm_movehdup_ps(dd));
    const __m128i sm = Q4KScalesMins(p + 4);
    // Pair p of the mins: m_{2p} | m_{2p+1} << 16, i.e. the 8 mins widened to int16.
    _mm_store_si128(reinterpret_cast<__m128i*>(s.mins[k][i]),
                    _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    _mm256_store_ps(s.scales[k][i], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)));
    for (int h = 0; h < 2; ++h) {
      const __m512i qs = _mm512_loadu_si512(p + 16 + 64 * h);
      _mm512_store_si512(nib[i] + 128 * h, _mm512_and_si512(qs, low4));
      _mm512_store_si512(nib[i] + 128 * h + 64,
                         _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4));
    }
  }
}

// Multiplies sub-blocks 2 kQ and 2 kQ + 1 of unit `at` into C tiles 2 (kQ % 2), 2 (kQ % 2) + 1.
template <int kQ>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxIssueQ4KPair(const AmxQ4KStream& s, const AmxUnit& at) {
  const uint8_t* nib = s.nibbles[at.u % 3][0];
  const uint8_t* q = s.q + 16 * 256 * at.b;
  constexpr int kJ = 2 * kQ;
  _tile_loadd(4, nib + AmxQ4KSubOffset(kJ), 256);
  _tile_loadd(6, q + 16 * 32 * kJ, 64);
  if constexpr (kQ % 2 == 0) _tile_dpbusd(0, 4, 6);
  if constexpr (kQ % 2 == 1) _tile_dpbusd(2, 4, 6);
  _tile_loadd(5, nib + AmxQ4KSubOffset(kJ + 1), 256);
  _tile_loadd(7, q + 16 * 32 * (kJ + 1), 64);
  if constexpr (kQ % 2 == 0) _tile_dpbusd(1, 5, 7);
  if constexpr (kQ % 2 == 1) _tile_dpbusd(3, 5, 7);
}

// Stores pair kQ's C tiles (AmxIssueQ4KPair) to C_{2 kQ}, C_{2 kQ + 1} of unit u and zeroes them.
template <int kQ>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStoreQ4KPair(AmxQ4KStream& s, int64_t u) {
  int32_t (*c)[256] = s.c[u & 1] + 2 * kQ;
  if constexpr (kQ % 2 == 0) {
    _tile_stored(0, c[0], 64);
    _tile_zero(0);
    _tile_stored(1, c[1], 64);
    _tile_zero(1);
  } else {
    _tile_stored(2, c[0], 64);
    _tile_zero(2);
    _tile_stored(3, c[1], 64);
    _tile_zero(3);
  }
}

// What the combine of one unit shares between its rows.
struct AmxQ4KFinishArgs {
  __m512 xv;  // the tokens' block scales
  __m512i sum_pairs[kAmxMinPairs<tensor::DType::kQ4_K>];
};

KVSERVE_MATMUL_AMX HWY_INLINE AmxQ4KFinishArgs AmxFinishArgsQ4K(const AmxQ4KStream& s,
                                                                const AmxUnit& at) {
  AmxQ4KFinishArgs f;
  const int64_t b = at.b;
  f.xv = _mm512_loadu_ps(s.dx + 16 * b);
  AmxSumPairs<tensor::DType::kQ4_K>(s.sums, b, f.sum_pairs);
  return f;
}

// acc rows [i0, i0 + 4) += the f32 chain of unit u from its stored C_j (the file comment's
// F + G = float(I_b)); M_b by vpdpwssd pairs as AmxMins, acc = fma(-dmin dx, M_b) by fnmadd.
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinishQ4K(AmxQ4KStream& s, const AmxQ4KFinishArgs& f,
                                                int64_t u, int i0) {
  const int32_t (*c)[256] = s.c[u & 1];
  const int k = static_cast<int>(u & 3);
  for (int r = i0; r < i0 + 4; ++r) {
    const float* sc = s.scales[k][r];
    auto term = [&](int j) HWY_ATTR {
      return _mm512_cvtepi32_ps(_mm512_load_si512(c[j] + 16 * r));
    };
    __m512 fs = _mm512_mul_ps(term(0), _mm512_set1_ps(sc[0]));
    __m512 gs = _mm512_mul_ps(term(4), _mm512_set1_ps(sc[4]));
    for (int j = 1; j < 4; ++j) {
      fs = _mm512_fmadd_ps(term(j), _mm512_set1_ps(sc[j]), fs);
      gs = _mm512_fmadd_ps(term(4 + j), _mm512_set1_ps(sc[4 + j]), gs);
    }
    const __m512 ints = _mm512_add_ps(fs, gs);
    const __m512 sd = _mm512_mul_ps(_mm512_set1_ps(s.d[k][r]), f.xv);
    __m512 a = _mm512_fmadd_ps(sd, ints, _mm512_load_ps(s.acc[r]));
    __m512i m = _mm512_setzero_si512();
    for (int p = 0; p < kAmxMinPairs<tensor::DType::kQ4_K>; ++p) {
      m = _mm512_dpwssd_epi32(m, f.sum_pairs[p], _mm512_set1_epi32(s.mins[k][r][p]));
    }
    const __m512 sm = _mm512_mul_ps(_mm512_set1_ps(s.dmin[k][r]), f.xv);
    _mm512_store_ps(s.acc[r], _mm512_fnmadd_ps(sm, _mm512_cvtepi32_ps(m), a));
  }
}

// Stage u of the pipeline (the file comment): units `prev` (u - 1, finished when u >= 1), `cur`
// (u) and `fill_at` (u + 2).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStageQ4K(AmxQ4KStream& s, const AmxUnit& prev,
                                               const AmxUnit& cur, const AmxUnit& fill_at) {
  const int64_t u = cur.u;
  const bool tiles = u < s.units, fill = u + 2 < s.units, finish = u >= 1;
  AmxQ4KFinishArgs f;
  if (finish) f = AmxFinishArgsQ4K(s, prev);
  auto vector_quarter = [&](int i0) HWY_ATTR {
    if (fill) AmxFillQ4K(s, fill_at, i0);
    if (finish) AmxFinishQ4K(s, f, u - 1, i0);
  };
  if (tiles) AmxIssueQ4KPair<0>(s, cur);
  vector_quarter(0);
  if (tiles) {
    AmxIssueQ4KPair<1>(s, cur);
    AmxStoreQ4KPair<0>(s, u);
  }
  vector_quarter(4);
  if (tiles) {
    AmxIssueQ4KPair<2>(s, cur);
    AmxStoreQ4KPair<1>(s, u);
  }
  vector_quarter(8);
  if (tiles) {
    AmxIssueQ4KPair<3>(s, cur);
    AmxStoreQ4KPair<2>(s, u);
  }
  vector_quarter(12);
  if (tiles) AmxStoreQ4KPair<3>(s, u);
}

// The calling thread's pipeline state (26 KiB: kept off the stack).
HWY_INLINE AmxQ4KStream& AmxQ4KStreamBuffer() {
  thread_local AmxQ4KStream stream;
  return stream;
}

// Sets the fields a one-group K-format stream (AmxQ4KStream, AmxQ6KStream) shares: rows
// [row_begin, row_end) of w, units of 16 rows x 256 values, the group's codes and block scales;
// returns the group's code sums (TokenGroups' layout).
template <class Stream>
HWY_INLINE const int32_t* AmxStartStream(Stream& s, const WeightMatrix& w,
                                         const internal::QuantActivations& act,
                                         int64_t row_begin, int64_t row_end) {
  const internal::TokenGroups layout{w.cols, 256, 1};
  s.row_bytes = tensor::RowBytes(w.dtype, w.cols);
  s.base = static_cast<const uint8_t*>(w.data) + row_begin * s.row_bytes;
  s.blocks = w.cols / 256;
  s.rows = row_end - row_begin;
  s.units = (s.rows + 15) / 16 * s.blocks;
  s.q = act.staging + layout.QOffset(0);
  s.dx = reinterpret_cast<const float*>(act.staging + layout.DOffset(0));
  return reinterpret_cast<const int32_t*>(act.staging + layout.SumsOffset(0));
}

// After a stage of a one-group stream (AmxQ4KStream, AmxQ6KStream): when unit `prev` was the
// last block of its row tile, that tile's rows are finished in s.acc; stores them by token into
// y (row 0 = the stream's first row, token t at y + t * y_stride) and clears s.acc.
template <typename Stream>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStoreFinishedTile(Stream& s, const AmxUnit& prev,
                                                        float* y, int64_t y_stride, int64_t n) {
  if (prev.u < 0 || prev.b != s.blocks - 1) return;
  const int64_t r = 16 * prev.tile;
  AmxStoreByToken(s.acc, y + r, y_stride, 0, n,
                  static_cast<int>(std::min<int64_t>(16, s.rows - r)));
  std::memset(s.acc, 0, sizeof(s.acc));
}

// Rows [row_begin, row_end) x tokens [0, n), n <= 16, of Q4_K by the pipeline above; the
// calling thread's tile state is configured here and released at the end.
KVSERVE_MATMUL_AMX inline void AmxRowsQ4K16(const WeightMatrix& w,
                                            const internal::QuantActivations& act, int64_t n,
                                            float* y, int64_t row_begin, int64_t row_end) {
  AmxQ4KStream& s = AmxQ4KStreamBuffer();
  s.sums = AmxStartStream(s, w, act, row_begin, row_end);
  std::memset(s.acc, 0, sizeof(s.acc));
  AmxUnit prev{-1, -1, s.blocks - 1}, cur{0, 0, 0};
  for (AmxUnit at = cur; at.u < std::min<int64_t>(2, s.units); at = AmxNextUnit(at, s.blocks)) {
    for (int i0 = 0; i0 < 16; i0 += 4) AmxFillQ4K(s, at, i0);
  }
  AmxConfigure32();
  AmxZeroCTiles();
  for (; cur.u <= s.units; prev = cur, cur = AmxNextUnit(cur, s.blocks)) {
    AmxStageQ4K(s, prev, cur, AmxNextUnit(AmxNextUnit(cur, s.blocks), s.blocks));
    AmxStoreFinishedTile(s, prev, y + row_begin, w.rows, n);
  }
  _tile_release();
}
