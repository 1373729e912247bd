// Few-token (decode) rows for Q8_0, Q4_K, Q5_K and Q6_K weights on AVX-512 VNNI. Textually
// included by matmul_x86_quant-inl.h for the AVX3_DL target only; see matmul.h for the scheme.
//
// A decode step multiplies one activation row (or, for a mixture of experts' expert in a batched
// step, a few: the tokens routed to it) by every weight matrix, so it is bound by reading the
// weights once. The row tiles decode 4 rows into a buffer first and reduce 8 lanes per row and
// block; here the file's blocks are read in place, 16 rows at a time, each block decoded once
// into registers and applied to the codes of every token of the call (T <= kGemvMaxTokens), and
// the 16 rows live in the 16 lanes of one register from the block integers on:
//   Q8_0, per row i and block pair (b, b + 1): one register of 64 weight bytes (u = q + 128)
//     times the 64 activation codes of the pair (dpbusd): lanes 0-7 hold partial sums of block
//     b, lanes 8-15 of block b + 1; I_b -= 128 S_b afterwards.
//   Q4_K, per row and block: the 4-bit values (u8) of two sub-blocks per register times their
//     codes (dpbusd: |a partial of 4 products| <= 7620 fits int16), times the sub-block scales
//     (dpwssd with the scale in the low int16 of each int32 lane); lanes folded to 0-7; lanes
//     8-15 carry m_j S_j (dpwssd) for M_b.
//   Q5_K: as Q4_K with the fifth bit added to the nibbles (u = 0..31; partials <= 15748).
//   Q6_K, per row and block: values u = q + 32 (0..63; partials <= 32004 fit int16) times codes,
//     times the int8 scales of 16-value sub-blocks (dpwssd), minus 32 sum_s sc_s S_s.
//   A fixed transposing tree (ReduceBlockPairs) adds the 16 rows' registers into two vectors
//     with lane i = row i (exact integer sums: any order gives the same integer), then per token
//     acc = fma(d_b * dx_b, float(I_b), acc) [and fma(dmin_b * dx_b, float(M_b), acc)] with the
//     rows' d_b gathered: the scheme's f32 chain, block after block, one lane per row. A token's
//     y is thus the same alone, among T, or through any other path.
// No per-thread buffer, no lane reduction per row and block.
//
// Another format joins with a GemvTile<Format> function of the tiles' signature (row0,
// row_bytes, num_rows, blocks, GemvTokens, y, y_stride), a case in GemvRowsT and its limit in
// GemvMaxTokens.

// Most tokens one pass of the gemv rows takes (the template bound); per format: GemvMaxTokens.
inline constexpr int kGemvMaxTokens = 12;

inline constexpr int kGemvRows = 16;

// d[i] (i < 16): lanes 0-7 partial sums of block b for row i, lanes 8-15 of block b + 1.
// Returns I_b (first) and I_{b + 1} (second) with lane i = row i.
KVSERVE_MATMUL_VNNI HWY_INLINE std::pair<__m512i, __m512i> ReduceBlockPairs(
    const __m512i (&d)[kGemvRows]) {
  // Pairs of rows: in each 128-bit lane, [r0, r1, r0, r1] partial sums of (2i, 2i + 1).
  __m512i e[8];
  for (int i = 0; i < 8; ++i) {
    e[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]),
                            _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
  }
  // Quads: 128-bit lane k of f[i] = rows 4i .. 4i + 3, each the sum of int32 lanes 4k .. 4k + 3.
  __m512i f[4];
  for (int i = 0; i < 4; ++i) {
    f[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(e[2 * i], e[2 * i + 1]),
                            _mm512_unpackhi_epi64(e[2 * i], e[2 * i + 1]));
  }
  // 128-bit lanes 0 + 1 are block b, 2 + 3 block b + 1: s[i] = [rows 8i..8i+3 of b, of b + 1,
  // rows 8i+4..8i+7 of b, of b + 1].
  __m512i s[2];
  for (int i = 0; i < 2; ++i) {
    s[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(f[2 * i], f[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(f[2 * i], f[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return {_mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0)),
          _mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1))};
}

// The 16 rows of a tile: pointers, and their byte offsets from row 0 for gathers (rows past
// num_rows repeat row 0; their lanes are computed and discarded).
struct GemvRowSet {
  const uint8_t* rows[kGemvRows];
  __m512i offsets;
};

HWY_INLINE GemvRowSet MakeRowSet(const uint8_t* row0, int64_t row_bytes, int num_rows) {
  GemvRowSet set;
  alignas(64) int32_t offsets[kGemvRows];
  for (int i = 0; i < kGemvRows; ++i) {
    offsets[i] = static_cast<int32_t>((i < num_rows ? i : 0) * row_bytes);
    set.rows[i] = row0 + offsets[i];
  }
  set.offsets = _mm512_load_si512(offsets);
  return set;
}

// The f16 in the low (shift 0) or high (shift 16) half of the 32-bit word at block0 + each
// row's offset (16 rows), widened exactly.
HWY_INLINE __m512 GatherHalf(const GemvRowSet& set, const uint8_t* block0, int shift) {
  __m512i v = _mm512_i32gather_epi32(set.offsets, block0, 1);
  if (shift != 0) v = _mm512_srli_epi32(v, 16);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// Asks for the `lines` cache lines from p of the next tile's same row (16 rows further on), so
// the next tile streams in while this one computes: the rows of a tile are read 16 at a time,
// which the hardware prefetchers follow poorly (measured: a third of the matmul time of a
// decode step without it). Past the matrix's end it only wastes a hint.
template <int kLines>
HWY_INLINE void PrefetchNextTile(const uint8_t* p, int64_t row_bytes) {
  for (int l = 0; l < kLines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kGemvRows * row_bytes + 64 * l), _MM_HINT_T0);
  }
}

// One register of 64 bytes: 32 from `lo` and 32 from `hi`.
HWY_INLINE __m512i LoadHalves(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(Load256(static_cast<const uint8_t*>(lo))),
                            Load256(static_cast<const uint8_t*>(hi)), 1);
}

// The quantized activations of the tokens of one call (matmul_portable.h's QuantActivations
// from its first token on): token t's codes at q + t * cols, block scales at dx + t * d_stride,
// code sums of each 16 at sums + t * (cols / 16).
struct GemvTokens {
  const int8_t* q;
  const float* dx;
  const int16_t* sums;
  int64_t cols;
  int64_t d_stride;  // cols / the activation block (32 or 256)

  const int8_t* Q(int t) const { return q + t * cols; }
  const float* Dx(int t) const { return dx + t * d_stride; }
  const int16_t* Sums(int t) const { return sums + t * (cols / 16); }
};

// Stores lanes i < num_rows of acc[t] to y + t * y_stride (token t's row of y).
template <int T>
HWY_INLINE void StoreRows(const __m512 (&acc)[T], int num_rows, float* y, int64_t y_stride) {
  const auto mask = static_cast<__mmask16>((1u << num_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

// The codes of 32-value block b summed.
HWY_INLINE int32_t Q8BlockSum(const int16_t* sums, int64_t b) {
  return int32_t{sums[2 * b]} + sums[2 * b + 1];
}

// y[t, i] for T tokens and rows i < num_rows of the 16 rows from row0 (row_bytes apart); the
// other tiles below take the same arguments.
template <int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileQ8_0(const uint8_t* row0, int64_t row_bytes,
                                                   int num_rows, int64_t blocks,
                                                   const GemvTokens& tok, float* y,
                                                   int64_t y_stride) {
  constexpr int64_t kBytes = 34;  // f16 d, then 32 int8 values
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  // acc[t] = fma(d_b dx_b, float(I_b - 128 S_b), acc[t]) for block b.
  auto finish = [&](int t, int64_t b, __m512 d, __m512i ints) HWY_ATTR {
    ints = _mm512_sub_epi32(ints, _mm512_set1_epi32(128 * Q8BlockSum(tok.Sums(t), b)));
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(tok.Dx(t)[b])),
                             _mm512_cvtepi32_ps(ints), acc[t]);
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    __m512i a[T];
    for (int t = 0; t < T; ++t) a[t] = _mm512_loadu_si512(tok.Q(t) + 32 * b);
    __m512i dots[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchNextTile<2>(p, row_bytes);  // 68 bytes per step
      const __m512i w = _mm512_xor_si512(LoadHalves(p + 2, p + kBytes + 2), flip);
      for (int t = 0; t < T; ++t) dots[t][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a[t]);
    }
    const __m512 d0 = GatherHalf(set, row0 + kBytes * b, 0);
    const __m512 d1 = GatherHalf(set, row0 + kBytes * (b + 1), 0);
    for (int t = 0; t < T; ++t) {
      const auto [first, second] = ReduceBlockPairs(dots[t]);
      finish(t, b, d0, first);
      finish(t, b + 1, d1, second);
    }
  }
  if (b < blocks) {  // an odd last block: the upper half's codes are zero
    __m512i a[T];
    for (int t = 0; t < T; ++t) {
      a[t] = _mm512_zextsi256_si512(Load256(reinterpret_cast<const uint8_t*>(tok.Q(t) + 32 * b)));
    }
    __m512i dots[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const __m512i w = _mm512_xor_si512(
          _mm512_zextsi256_si512(Load256(set.rows[i] + kBytes * b + 2)), flip);
      for (int t = 0; t < T; ++t) dots[t][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a[t]);
    }
    const __m512 d0 = GatherHalf(set, row0 + kBytes * b, 0);
    for (int t = 0; t < T; ++t) finish(t, b, d0, ReduceBlockPairs(dots[t]).first);
  }
  StoreRows<T>(acc, num_rows, y, y_stride);
}

// Q4_K / Q5_K: the 8 sub-block scales (int32 lanes 0-7) and mins (lanes 8-15) of the block
// whose 12-byte scale field is at p (ggml's packing: tensor/quant_ints.h).
HWY_INLINE __m512i Q4KScalesMins(const uint8_t* p) {
  uint32_t u[3];
  std::memcpy(u, p, 12);
  constexpr uint32_t kLow6 = 0x3F3F3F3F, kLow4 = 0x0F0F0F0F, kLow2 = 0x03030303;
  const uint32_t sc_lo = u[0] & kLow6;                                           // scales 0-3
  const uint32_t sc_hi = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);          // scales 4-7
  const uint32_t mn_lo = u[1] & kLow6;                                           // mins 0-3
  const uint32_t mn_hi = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4-7
  return _mm512_cvtepu8_epi32(_mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo),
                                            static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
}

// A 512-bit value of two 256-bit halves: lo in lanes 0-7 (32-bit) or bytes 0-31, hi above.
HWY_INLINE __m512i Halves(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Q4_K (kFifthBit false) and Q5_K (true). Register k (k < 4) of a block's values: the low (k
// even) or high nibbles of qs[64 (k / 2) ..], i.e. sub-blocks s = 4 (k / 2) + k % 2 (bytes
// 0-31) and s + 2 (bytes 32-63); Q5_K adds 16 where bit s (s + 2) of qh[byte % 32] is set.
template <bool kFifthBit, int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileQ4K(const uint8_t* row0, int64_t row_bytes,
                                                  int num_rows, int64_t blocks,
                                                  const GemvTokens& tok, float* y,
                                                  int64_t y_stride) {
  // d, dmin, scales[12], [qh[32]], qs[128]
  constexpr int64_t kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  __m512i pick[4], bit[4];
  for (int k = 0; k < 4; ++k) {
    const int s = 4 * (k / 2) + k % 2;
    bit[k] = Halves(_mm256_set1_epi8(static_cast<char>(1 << s)),
                    _mm256_set1_epi8(static_cast<char>(1 << (s + 2))));
    // lanes 0-7 pick sub-block s's scale, lanes 8-15 sub-block s + 2's
    pick[k] = Halves(_mm256_set1_epi32(s), _mm256_set1_epi32(s + 2));
  }
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i a[T][4], s[T];
    for (int t = 0; t < T; ++t) {
      const int8_t* ab = tok.Q(t) + 256 * b;
      a[t][0] = LoadHalves(ab, ab + 64);
      a[t][1] = LoadHalves(ab + 32, ab + 96);
      a[t][2] = LoadHalves(ab + 128, ab + 192);
      a[t][3] = LoadHalves(ab + 160, ab + 224);
      // S_j (the codes of sub-block j summed) in lanes 8-15, zero in lanes 0-7.
      const __m256i s8 = _mm256_madd_epi16(
          Load256(reinterpret_cast<const uint8_t*>(tok.Sums(t) + 16 * b)), _mm256_set1_epi16(1));
      s[t] = _mm512_inserti64x4(_mm512_setzero_si512(), s8, 1);
    }
    __m512i parts[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchNextTile<3>(p, row_bytes);  // 144 or 176 bytes per step (the next block's: the rest)
      const __m512i sm = Q4KScalesMins(p + 4);
      const __m512i w0 = _mm512_loadu_si512(p + kQs), w1 = _mm512_loadu_si512(p + kQs + 64);
      __m512i nib[4] = {_mm512_and_si512(w0, low4),
                        _mm512_and_si512(_mm512_srli_epi16(w0, 4), low4),
                        _mm512_and_si512(w1, low4),
                        _mm512_and_si512(_mm512_srli_epi16(w1, 4), low4)};
      if constexpr (kFifthBit) {
        const __m512i qh = _mm512_broadcast_i64x4(Load256(p + 16));
        for (int k = 0; k < 4; ++k) {
          nib[k] = _mm512_mask_add_epi8(nib[k], _mm512_test_epi8_mask(qh, bit[k]), nib[k], sixteen);
        }
      }
      __m512i scale[4];
      for (int k = 0; k < 4; ++k) scale[k] = _mm512_and_si512(_mm512_permutexvar_epi32(pick[k], sm), low16);
      for (int t = 0; t < T; ++t) {
        __m512i sum = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
          // |a partial of 4 products| <= 4 * 31 * 127 = 15748 fits int16: times the scale
          // (dpwssd: madd and add in one)
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[k], a[t][k]);
          sum = _mm512_dpwssd_epi32(sum, dot, scale[k]);
        }
        const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(sum),
                                                _mm512_extracti64x4_epi64(sum, 1));
        // Lanes 0-7 of s are zero, so the I partials stay alone there.
        parts[t][i] = _mm512_dpwssd_epi32(_mm512_zextsi256_si512(folded), s[t], sm);
      }
    }
    const __m512 d = GatherHalf(set, row0 + kBytes * b, 0);
    const __m512 dmin = _mm512_castsi512_ps(  // minus the file's dmin, exactly
        _mm512_xor_si512(_mm512_castps_si512(GatherHalf(set, row0 + kBytes * b, 16)),
                         _mm512_set1_epi32(static_cast<int>(0x80000000u))));
    for (int t = 0; t < T; ++t) {
      const auto [ints, mins] = ReduceBlockPairs(parts[t]);
      const __m512 xv = _mm512_set1_ps(tok.Dx(t)[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xv), _mm512_cvtepi32_ps(ints), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, xv), _mm512_cvtepi32_ps(mins), acc[t]);
    }
  }
  StoreRows<T>(acc, num_rows, y, y_stride);
}

// Q6_K: value i of the block has low bits from ql and high bits from qh (tensor/quant_ints.h).
// Register v (v < 4) holds values 64 v .. 64 v + 63 in order, as u = q + 32.
template <int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileQ6K(const uint8_t* row0, int64_t row_bytes,
                                                  int num_rows, int64_t blocks,
                                                  const GemvTokens& tok, float* y,
                                                  int64_t y_stride) {
  constexpr int64_t kBytes = 210;  // ql[128], qh[64], scales[16], d
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i three = _mm512_set1_epi8(3);
  // Shifts of qh for the two halves of a register: quads (0, 1) or (2, 3) of the 128-value half.
  const __m512i shift01 = Halves(_mm256_setzero_si256(), _mm256_set1_epi16(2));
  const __m512i shift23 = _mm512_add_epi16(shift01, _mm512_set1_epi16(4));
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  __m512i pick[4];  // register v: sub-blocks 4 v .. 4 v + 3, four int32 lanes each
  for (int v = 0; v < 4; ++v) {
    pick[v] = _mm512_set_epi32(4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 2, 4 * v + 2,
                               4 * v + 2, 4 * v + 2, 4 * v + 1, 4 * v + 1, 4 * v + 1, 4 * v + 1,
                               4 * v, 4 * v, 4 * v, 4 * v);
  }
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i a[T][4];
    __m256i bsums[T];
    for (int t = 0; t < T; ++t) {
      for (int v = 0; v < 4; ++v) a[t][v] = _mm512_loadu_si512(tok.Q(t) + 256 * b + 64 * v);
      bsums[t] = Load256(reinterpret_cast<const uint8_t*>(tok.Sums(t) + 16 * b));
    }
    __m512i parts[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchNextTile<4>(p, row_bytes);  // 210 bytes per step
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
      const __m512i sc = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), low16);
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      __m512i u[4], scale[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(p + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(Load256(p + 128 + 32 * h));
        const __m512i nib[2] = {_mm512_and_si512(ql, low4),
                                _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4)};
        for (int k = 0; k < 2; ++k) {
          const __m512i high =
              _mm512_and_si512(_mm512_srlv_epi16(qh, k == 0 ? shift01 : shift23), three);
          u[2 * h + k] = _mm512_or_si512(nib[k], _mm512_slli_epi16(high, 4));
        }
      }
      for (int v = 0; v < 4; ++v) scale[v] = _mm512_permutexvar_epi32(pick[v], sc);
      for (int t = 0; t < T; ++t) {
        __m512i sum = _mm512_setzero_si512();
        for (int v = 0; v < 4; ++v) {
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[v], a[t][v]);
          sum = _mm512_dpwssd_epi32(sum, dot, scale[v]);
        }
        // minus 32 sum_s sc_s S_s (pairs of sub-blocks per int32 lane)
        const __m256i corr = _mm256_madd_epi16(sc16, bsums[t]);
        parts[t][i] = _mm512_sub_epi32(sum, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
      }
    }
    // d is bytes 208-209: the high half of the word at 206, inside the block.
    const __m512 d = GatherHalf(set, row0 + kBytes * b + 206, 16);
    for (int t = 0; t < T; ++t) {
      const auto [lo, hi] = ReduceBlockPairs(parts[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(tok.Dx(t)[b])),
                               _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), acc[t]);
    }
  }
  StoreRows<T>(acc, num_rows, y, y_stride);
}

// Batches of at most this many tokens of format t take the gemv rows; 0: t has none. Measured
// against the token-group tiles that MatMul runs for more tokens (AMX from 16), one thread,
// expert-sized matrices (BM_ExpertMatMul in bench/matmul_bench.cc, docs/PERFORMANCE.md): the
// K formats cross over at about 12 tokens, Q8_0 (one dpbusd per 64 values between reductions)
// at about 8.
constexpr int GemvMaxTokens(tensor::DType t) {
  using tensor::DType;
  if (t == DType::kQ8_0) return 8;
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ? kGemvMaxTokens : 0;
}
template <tensor::DType kType>
inline constexpr bool kHasGemv = GemvMaxTokens(kType) > 0;

// Rows [row_begin, row_end) x the T tokens of tok, 16 rows at a time (each weight block read
// once for all T tokens).
template <tensor::DType kType, int T>
KVSERVE_MATMUL_VNNI void GemvRowsT(const WeightMatrix& w, const GemvTokens& tok, float* y,
                                   int64_t row_begin, int64_t row_end) {
  const int64_t row_bytes = tensor::RowBytes(kType, w.cols);
  const int64_t blocks = w.cols / QuantTraits<kType>::kBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kGemvRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kGemvRows, row_end - r));
    const uint8_t* row0 = base + r * row_bytes;
    using tensor::DType;
    if constexpr (kType == DType::kQ8_0) {
      GemvTileQ8_0<T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    } else if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
      GemvTileQ4K<kType == DType::kQ5_K, T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    } else {
      static_assert(kType == DType::kQ6_K);
      GemvTileQ6K<T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    }
  }
}

// Rows [row_begin, row_end) of a kHasGemv format for tokens [0, n), n <= GemvMaxTokens(kType):
// one pass over the rows for all n tokens.
template <tensor::DType kType, int T = kGemvMaxTokens>
KVSERVE_MATMUL_VNNI void GemvRows(const WeightMatrix& w, const internal::QuantActivations& act,
                                  int64_t n, float* y, int64_t row_begin, int64_t row_end) {
  if constexpr (T >= 1) {
    if (n < T) return GemvRows<kType, T - 1>(w, act, n, y, row_begin, row_end);
    const GemvTokens tok{act.q, act.d, act.sums, w.cols, w.cols / QuantTraits<kType>::kBlock};
    GemvRowsT<kType, T>(w, tok, y, row_begin, row_end);
  }
}
