// AMX int8 tiles for one group of 16 tokens and Q6_K weights: AmxRowsQ6K16. Textually included
// by matmul_x86_quant-inl.h after matmul_x86_amx-inl.h (the K formats' two-part tiles and their
// bounds), AVX3_DL target only; see matmul.h for the scheme.
//
// The scheme's I_b = sum_j s_j sum_{i in j} (q_i - 32) a_i (16-value sub-blocks j, int8 scales
// s_j, 6-bit q_i) in the two byte parts of AmxRowsK: A_l and A_h the low (unsigned) and high
// (signed) bytes of scaled values, C_l and C_h their tile products with the group's codes, I_b =
// C_l + 256 C_h. Here the scaled values are v_i = s_j q_i, the bare q_i (0..63, |v_i| <= 8064):
// vpmaddubsw multiplies the bytes q by the bytes s_j (even and odd bytes apart: 16-bit products
// exact, one term of each pair zero), and vpermt2b packs the products' low and high bytes back in
// value order (about 36 vector instructions per row and block against about 70 for the 16-bit
// decode of AmxFillPartsInPlace). The offset's term -32 sum_j s_j S_j (S_j the code sum of
// sub-block j, |S_j| <= 2032) is added by the tile unit as well: -32 S_j = x_j + 256 (y_j + y'_j)
// with x_j in [0, 255] and y_j, y'_j in [-127, 127] (AmxQ6KOffsetTiles: one B tile per block of
// the group), and A tiles of the rows' 16 scales:
//   C_l += sum_j s_j x_j (tdpbsud),   C_h += sum_j s_j (y_j + y'_j) (tdpbssd),
// so C_l + 256 C_h is exactly I_b, and the f32 chain of the scheme follows as AmxFinishBlockK runs
// it: acc = fma(d_b * dx_b, float(I_b), acc).
//
// Pipeline over the units u (block b of row tile T, u = T * blocks + b; it runs on across row
// tiles, so a row of a few blocks still overlaps), stage u: drain unit u - 1's C tiles; then four
// times: issue a K = 64 step of unit u, fill a quarter of the rows of unit u + 1, finish a
// quarter of unit u - 1; last the offset tiles of unit u. Tiles: AmxConfigure's (all 16 x 64
// bytes): C_l, C_h of unit parity k in tmm(k), tmm(2 + k); A in tmm4 (l, and the scales for x),
// tmm5 (h, and the scales for y); the codes in tmm6, the offset tile in tmm7.

// Everything the Q6_K pipeline reads and writes; per-unit buffers are indexed by u % 2 (parts,
// scales) or u % 3 (d).
struct AmxQ6KStream {
  const uint8_t* base;  // row row_begin
  int64_t row_bytes, blocks, rows, units;  // rows from row_begin
  const uint8_t* q;     // the group's codes (TokenGroups' q layout)
  const float* dx;      // the group's block scales [b][16 tokens]
  const uint8_t* offset_tiles;  // [b][16 rows][64]: AmxQ6KOffsetTiles
  alignas(64) int8_t parts[2][2][16][256];  // [unit][l, h][row][value]
  // Row r + 1: s(16) s(16) 0(32), the row's 16 scales twice; row 0 zero. Read from row 1 (64
  // apart), the A tile against y, y' (the offset tile's rows 0-7); from 32 bytes before, the one
  // against x (rows 8-11): 0(32) s(16) s(16), the offset tile's rows 12-15 being zero.
  alignas(64) int8_t scales[2][17][64];
  alignas(64) int32_t c[2][256];            // C_l, C_h [16 rows][16 tokens]
  alignas(64) float d[3][16];               // the file's d of row r
  alignas(64) float acc[16][16];            // [16 rows][16 tokens] of the finishing row tile
};

// The offset tiles of the group (code sums `sums`, TokenGroups' layout) for `blocks` blocks into
// out [b][16][64] (B layout: row k' holds sub-blocks 4 (k' % 4) .. + 3 of the 16 tokens): rows 0-3
// y_j, rows 4-7 y'_j, rows 8-11 x_j, rows 12-15 zero, where -32 S_j = x_j + 256 (y_j + y'_j).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxQ6KOffsetTiles(const int32_t* sums, int64_t blocks,
                                                     uint8_t* out) {
  const __m512i byte = _mm512_set1_epi32(0xFF);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* tile = out + 1024 * b;
    for (int k = 0; k < 4; ++k) {  // sub-blocks 4 k .. 4 k + 3
      __m512i y = _mm512_setzero_si512(), y2 = y, x = y;
      for (int j = 0; j < 4; ++j) {
        const __m512i s = _mm512_loadu_si512(sums + 16 * (16 * b + 4 * k + j));
        const __m512i minus32s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 5));
        const __m512i high = _mm512_srai_epi32(minus32s, 8);  // [-254, 254]
        const __m512i half = _mm512_srai_epi32(high, 1);
        auto put = [&](__m512i& row, __m512i v) HWY_ATTR {
          row = _mm512_or_si512(row, _mm512_slli_epi32(_mm512_and_si512(v, byte), 8 * j));
        };
        put(y, half);
        put(y2, _mm512_sub_epi32(high, half));
        put(x, minus32s);
      }
      _mm512_store_si512(tile + 64 * k, y);
      _mm512_store_si512(tile + 64 * (4 + k), y2);
      _mm512_store_si512(tile + 64 * (8 + k), x);
      _mm512_store_si512(tile + 64 * (12 + k), _mm512_setzero_si512());
    }
  }
}

// vpermb index of unit part r (values 64 r .. of the block): each byte's sub-block (4 r + byte
// / 16), to pick its scale.
alignas(64) inline constexpr auto kAmxQ6KSubBlock = [] {
  std::array<std::array<uint8_t, 64>, 4> t{};
  for (int r = 0; r < 4; ++r) {
    for (int k = 0; k < 64; ++k) t[r][k] = static_cast<uint8_t>(4 * r + k / 16);
  }
  return t;
}();

// The two parts of 64 values (bare q in `q`, value order) of sub-block range r, scales `sc`,
// stored at l and l + 16 * 256 (part h).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxQ6KScaleParts(__m512i q, int r, __m512i sc, int8_t* l) {
  constexpr __mmask64 kEven = 0x5555555555555555ull;
  const __m512i index = _mm512_load_si512(kAmxQ6KSubBlock[r].data());
  const __m512i even = _mm512_maddubs_epi16(q, _mm512_maskz_permutexvar_epi8(kEven, index, sc));
  const __m512i odd = _mm512_maddubs_epi16(q, _mm512_maskz_permutexvar_epi8(~kEven, index, sc));
  const __m512i pick_l = _mm512_load_si512(kAmxPartPick.data());
  const __m512i pick_h = _mm512_add_epi8(pick_l, _mm512_set1_epi8(1));
  _mm512_store_si512(l, _mm512_permutex2var_epi8(even, pick_l, odd));
  _mm512_store_si512(l + 16 * 256, _mm512_permutex2var_epi8(even, pick_h, odd));
}

// Fills rows [i0, i0 + 4) of unit `at`: parts, scales, d; rows past the matrix's get zeros.
// Q6_K block: ql[128], qh[64], scales[16], d. Values 128 h + 32 g + l (l < 32) are nibble g / 2
// of ql[64 h + 32 (g % 2) + l] with bits 2 g, 2 g + 1 of qh[32 h + l] above.
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFillQ6K(AmxQ6KStream& s, const AmxUnit& at, int i0) {
  const int64_t tile = at.tile, b = at.b;
  int8_t (*parts)[256] = s.parts[at.u & 1][0];
  int8_t (*scales)[64] = s.scales[at.u & 1] + 1;
  float* d = s.d[at.u % 3];
  const __m512i low4 = _mm512_set1_epi8(0x0F), high2 = _mm512_set1_epi8(0x30);
  // qh's bits for values 128 h + l and + 32 (shifted left by 4 and 2 to bits 4-5), for + 64
  // and + 96 (right by 0 and 2); each register half reads the same 32 bytes of qh.
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  for (int i = i0; i < i0 + 4; ++i) {
    const int64_t row = 16 * tile + i;
    if (row >= s.rows) {
      std::memset(parts[i], 0, 256);
      std::memset(parts[16 + i], 0, 256);
      std::memset(scales[i], 0, 64);
      d[i] = 0.0f;
      continue;
    }
    const uint8_t* p = s.base + row * s.row_bytes + 210 * b;
    AmxPrefetchNextTile<4>(p, s.row_bytes);
    d[i] = LoadHalf(p + 208);
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    _mm512_store_si512(scales[i], _mm512_zextsi256_si512(_mm256_broadcastsi128_si256(sc)));
    const __m512i sc512 = _mm512_zextsi128_si512(sc);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(Load256(p + 128 + 32 * h));
      const __m512i hi_lo = _mm512_and_si512(_mm512_sllv_epi16(qh, shift_lo), high2);
      const __m512i hi_hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), high2);
      // (a & c) | b: the nibble and its two high bits.
      const __m512i lo = _mm512_ternarylogic_epi32(ql, hi_lo, low4, 0xEC);
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), hi_hi, low4, 0xEC);
      AmxQ6KScaleParts(lo, 2 * h, sc512, parts[i] + 128 * h);
      AmxQ6KScaleParts(hi, 2 * h + 1, sc512, parts[i] + 128 * h + 64);
    }
  }
}

// Issues K = 64 step kStep of unit `at` (into C tiles kOdd, 2 + kOdd), the codes into tmm(6 + kB);
// kStep 4: the offset tiles.
template <int kOdd, int kStep, int kB>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxIssueQ6KStep(const AmxQ6KStream& s, const AmxUnit& at) {
  const int8_t* l = s.parts[kOdd][0][0] + 64 * kStep;
  const int8_t* sc = s.scales[kOdd][1];
  const uint8_t* codes = kStep == 4 ? s.offset_tiles + 1024 * at.b
                                    : s.q + 16 * (256 * at.b + 64 * kStep);
  if constexpr (kB == 0) {
    _tile_loadd(6, codes, 64);
  } else {
    _tile_loadd(7, codes, 64);
  }
  if constexpr (kStep == 4) {
    _tile_loadd(4, sc - 32, 64);
    _tile_loadd(5, sc, 64);
  } else {
    _tile_loadd(4, l, 256);
    _tile_loadd(5, l + 16 * 256, 256);
  }
#define KVSERVE_AMX_Q6K_STEP(c_l, c_h, b)                      \
  if constexpr (kStep == 4) {                                 \
    _tile_dpbsud(c_l, 4, b);                                   \
  } else {                                                     \
    _tile_dpbusd(c_l, 4, b);                                   \
  }                                                            \
  _tile_dpbssd(c_h, 5, b);
  if constexpr (kOdd == 0 && kB == 0) {
    KVSERVE_AMX_Q6K_STEP(0, 2, 6)
  } else if constexpr (kOdd == 0) {
    KVSERVE_AMX_Q6K_STEP(0, 2, 7)
  } else if constexpr (kB == 0) {
    KVSERVE_AMX_Q6K_STEP(1, 3, 6)
  } else {
    KVSERVE_AMX_Q6K_STEP(1, 3, 7)
  }
#undef KVSERVE_AMX_Q6K_STEP
}

// acc rows [i0, i0 + 4) += the f32 chain of unit u from its drained C (AmxFinishBlockK's).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinishQ6K(AmxQ6KStream& s, __m512 xv, int64_t u, int i0) {
  const float* d = s.d[u % 3];
  for (int r = i0; r < i0 + 4; ++r) {
    const __m512i ints = _mm512_add_epi32(_mm512_load_si512(s.c[0] + 16 * r),
                                          _mm512_slli_epi32(_mm512_load_si512(s.c[1] + 16 * r), 8));
    const __m512 sd = _mm512_mul_ps(_mm512_set1_ps(d[r]), xv);
    _mm512_store_ps(s.acc[r], _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(ints), _mm512_load_ps(s.acc[r])));
  }
}

// Stage u of the pipeline (kOdd = u % 2; the file comment): units `prev` (u - 1, finished when
// u >= 1), `cur` (u) and `next` (u + 1).
template <int kOdd>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStageQ6K(AmxQ6KStream& s, const AmxUnit& prev,
                                               const AmxUnit& cur, const AmxUnit& next) {
  const int64_t u = cur.u;
  const bool tiles = u < s.units, fill = u + 1 < s.units, finish = u >= 1;
  __m512 xv = _mm512_setzero_ps();
  if (finish) {
    if constexpr (kOdd == 1) {
      _tile_stored(0, s.c[0], 64);
      _tile_zero(0);
      _tile_stored(2, s.c[1], 64);
      _tile_zero(2);
    } else {
      _tile_stored(1, s.c[0], 64);
      _tile_zero(1);
      _tile_stored(3, s.c[1], 64);
      _tile_zero(3);
    }
    xv = _mm512_loadu_ps(s.dx + 16 * prev.b);
  }
  // Five steps per unit: the codes' tile alternates between tmm6 and tmm7 across units too.
  auto quarter = [&](int k) HWY_ATTR {
    if (fill) AmxFillQ6K(s, next, 4 * k);
    if (finish) AmxFinishQ6K(s, xv, u - 1, 4 * k);
  };
  if (tiles) AmxIssueQ6KStep<kOdd, 4, kOdd>(s, cur);
  if (tiles) AmxIssueQ6KStep<kOdd, 0, 1 - kOdd>(s, cur);
  quarter(0);
  if (tiles) AmxIssueQ6KStep<kOdd, 1, kOdd>(s, cur);
  quarter(1);
  if (tiles) AmxIssueQ6KStep<kOdd, 2, 1 - kOdd>(s, cur);
  quarter(2);
  if (tiles) AmxIssueQ6KStep<kOdd, 3, kOdd>(s, cur);
  quarter(3);
}

// The calling thread's pipeline state (27 KiB) and offset tiles (1 KiB per block): kept off the
// stack.
HWY_INLINE AmxQ6KStream& AmxQ6KStreamBuffer() {
  thread_local AmxQ6KStream stream;
  return stream;
}
HWY_INLINE uint8_t* AmxQ6KOffsetBuffer(int64_t blocks) {
  thread_local std::vector<uint8_t> buffer;
  const size_t bytes = static_cast<size_t>(1024 * blocks + 64);
  if (buffer.size() < bytes) buffer.resize(bytes);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) & ~uintptr_t{63});
}

// Rows [row_begin, row_end) x tokens [0, n), n <= 16, of Q6_K by the pipeline above; the calling
// thread's tile state is configured here and released at the end.
KVSERVE_MATMUL_AMX inline void AmxRowsQ6K16(const WeightMatrix& w,
                                            const internal::QuantActivations& act, int64_t n,
                                            float* y, int64_t row_begin, int64_t row_end) {
  AmxQ6KStream& s = AmxQ6KStreamBuffer();
  const int32_t* sums = AmxStartStream(s, w, act, row_begin, row_end);
  uint8_t* offset_tiles = AmxQ6KOffsetBuffer(s.blocks);
  AmxQ6KOffsetTiles(sums, s.blocks, offset_tiles);
  s.offset_tiles = offset_tiles;
  std::memset(s.scales, 0, sizeof(s.scales));
  std::memset(s.acc, 0, sizeof(s.acc));
  AmxUnit prev{-1, -1, s.blocks - 1}, cur{0, 0, 0};
  for (int i0 = 0; i0 < 16; i0 += 4) AmxFillQ6K(s, cur, i0);
  AmxConfigure();
  AmxZeroCTiles();
  for (; cur.u <= s.units; prev = cur, cur = AmxNextUnit(cur, s.blocks)) {
    const AmxUnit next = AmxNextUnit(cur, s.blocks);
    if (cur.u % 2 == 0) {
      AmxStageQ6K<0>(s, prev, cur, next);
    } else {
      AmxStageQ6K<1>(s, prev, cur, next);
    }
    AmxStoreFinishedTile(s, prev, y + row_begin, w.rows, n);
  }
  _tile_release();
}
