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
//     codes in pairs (maddubs: |2 products| <= 3810, no saturation), times the sub-block scales
//     (madd / dpwssd with the scale in both int16 halves of each int32 lane, placed by vpermb);
//     M_b once per block for the 16 rows, lane i = row i: the rows' mins gathered from their
//     scale fields, in int16 pairs, times each token's code sums of the pairs (4 dpwssd).
//   Q5_K: as Q4_K with the fifth bit added to the nibbles (u = 0..31; pairs <= 7874).
//   Q6_K, per row and block: values u = q + 32 (0..63; pairs <= 16002 fit int16) times codes,
//     times the int8 scales of 16-value sub-blocks (as Q4_K's), minus 32 sum_s sc_s S_s.
//   A fixed transposing tree (ReduceBlockPairs) adds the 16 rows' registers into two vectors
//     with lane i = row i (exact integer sums: any order gives the same integer), then per token
//     acc = fma(d_b * dx_b, float(I_b), acc) [and fma(dmin_b * dx_b, float(M_b), acc)] with the
//     rows' d_b gathered: the scheme's f32 chain, block after block, one lane per row. A token's
//     y is thus the same alone, among T, or through any other path.
// No per-thread buffer, no lane reduction per row and block.
// Q4_K for 2 or more tokens (a mixture of experts' expert in a batched step) takes
// GemvTileQ4KLanes instead: the 16 rows' words are transposed so that each lane holds one row
// from the start, and each token then costs 4 dpbusd per row and block (plus a few vpmulld per
// 16 rows) and no reduction; the integers and the f32 chain are the same.
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

// The 32-bit word at block0 + each row's offset (16 rows).
HWY_INLINE __m512i GatherWords(const GemvRowSet& set, const uint8_t* block0) {
  return _mm512_i32gather_epi32(set.offsets, block0, 1);
}

// The f16 in the low (shift 0) or high (shift 16) half of each 32-bit lane, widened exactly.
HWY_INLINE __m512 HalfOfWords(__m512i v, int shift) {
  if (shift != 0) v = _mm512_srli_epi32(v, 16);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// The f16 in the low (shift 0) or high (shift 16) half of the 32-bit word at block0 + each
// row's offset (16 rows), widened exactly.
HWY_INLINE __m512 GatherHalf(const GemvRowSet& set, const uint8_t* block0, int shift) {
  return HalfOfWords(GatherWords(set, block0), shift);
}

// The distance in bytes from the tile at row0 to the memory its prefetches ask for: the next
// tile (tile_rows further on), or for the last tile of a matrix whose caller reads other bytes
// next (internal::gemv_lookahead: a mixture of experts' gate, then up, then down), those bytes
// at the same offsets, so that the next matrix's first tile is not read cold.
HWY_INLINE int64_t NextTileDistance(const uint8_t* row0, int64_t row_bytes,
                                    int64_t tile_rows = kGemvRows) {
  const int64_t ahead = tile_rows * row_bytes;
  const internal::GemvLookahead& look = internal::gemv_lookahead;
  if (look.then != nullptr && reinterpret_cast<uintptr_t>(row0 + ahead) >=
                                  reinterpret_cast<uintptr_t>(look.end)) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(look.then) -
                                reinterpret_cast<uintptr_t>(row0));
  }
  return ahead;
}

// Asks for the `lines` cache lines from p + distance (NextTileDistance: the next tile's same
// row), so the next tile streams in while this one computes: the rows of a tile are read 16 at
// a time, which the hardware prefetchers follow poorly (measured: a third of the matmul time of
// a decode step without it; on the AMD EPYC Zen 5 several times slower). Past the matrix's end
// it only wastes a hint.
template <int kLines>
HWY_INLINE void PrefetchAhead(const uint8_t* p, int64_t distance) {
  for (int l = 0; l < kLines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + distance + 64 * l), _MM_HINT_T0);
  }
}

// Asks for the bytes [begin, end), cache line after cache line in address order.
HWY_INLINE void PrefetchSpan(const uint8_t* begin, const uint8_t* end) {
  const uintptr_t stop = reinterpret_cast<uintptr_t>(end);
  for (uintptr_t p = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{63}; p < stop; p += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
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
  const int64_t ahead = NextTileDistance(row0, row_bytes);
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
      PrefetchAhead<2>(p, ahead);  // 68 bytes per step
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

// A vpermb index whose int32 lane j reads int16 number source(j) of a register (its bytes
// 2 source(j), 2 source(j) + 1) into both of its int16 halves, for madd / dpwssd with int16 pairs.
// With kBytes, it reads byte source(j) into the low byte of both halves instead (for
// _mm512_maskz_permutexvar_epi8 with kLowBytes, which zeroes the high bytes: unsigned bytes).
template <bool kBytes = false, typename Source>
HWY_INLINE __m512i PickInt16(Source source) {
  alignas(64) uint8_t idx[64];
  for (int j = 0; j < 16; ++j) {
    const int s = source(j);
    for (int h = 0; h < 2; ++h) {
      idx[4 * j + 2 * h] = static_cast<uint8_t>(kBytes ? s : 2 * s);
      idx[4 * j + 2 * h + 1] = static_cast<uint8_t>(kBytes ? s : 2 * s + 1);
    }
  }
  return _mm512_load_si512(idx);
}
inline constexpr __mmask64 kLowBytes = 0x5555555555555555ull;

// A 512-bit value of two 256-bit halves: lo in lanes 0-7 (32-bit) or bytes 0-31, hi above.
HWY_INLINE __m512i Halves(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Q4_K (kFifthBit false) and Q5_K (true). Register k (k < 4) of a block's values: the low (k
// even) or high nibbles of qs[64 (k / 2) ..], i.e. sub-blocks s = 4 (k / 2) + k % 2 (bytes
// 0-31) and s + 2 (bytes 32-63); Q5_K adds 16 where bit s (s + 2) of qh[byte % 32] is set.
// vpshufb indices: bytes `first` and `first + 1` of each 32-bit lane, zero-extended to its two
// int16 halves (vpshufb indexes within a 128-bit lane).
KVSERVE_MATMUL_VNNI HWY_INLINE __m512i BytePairIndex(int first) {
  alignas(64) uint8_t idx[64];
  for (int j = 0; j < 64; j += 4) {
    const int lane_byte = j % 16;
    idx[j] = static_cast<uint8_t>(lane_byte + first);
    idx[j + 1] = 0x80;
    idx[j + 2] = static_cast<uint8_t>(lane_byte + first + 1);
    idx[j + 3] = 0x80;
  }
  return _mm512_load_si512(idx);
}

// Minus the dmin of the rows' d | dmin << 16 words, exactly (the sign bit flipped).
KVSERVE_MATMUL_VNNI HWY_INLINE __m512 NegatedDmin(__m512i d_dmin) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(HalfOfWords(d_dmin, 16)),
                                              _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// The 16 rows' Q4_K mins in lanes, as int16 pairs m_{2p} | m_{2p + 1} << 16 (out[p], p < 4;
// Q4KScalesMins' bit layout), from the scale field's words u1 (bytes 8-11) and u2 (bytes 12-15)
// of each row: mins 0-3 = u1 & 0x3F..; mins 4-7 = ((u2 >> 4) & 0x0F..) | ((u1 >> 6) & 0x03..)
// << 4. first_pair / second_pair: BytePairIndex(0) / BytePairIndex(2).
KVSERVE_MATMUL_VNNI HWY_INLINE void Q4KMinPairs(__m512i u1, __m512i u2, __m512i first_pair,
                                                __m512i second_pair, __m512i (&out)[4]) {
  const __m512i m03 = _mm512_and_si512(u1, _mm512_set1_epi32(0x3F3F3F3F));
  const __m512i m47 = _mm512_ternarylogic_epi32(
      _mm512_srli_epi32(u2, 4),
      _mm512_and_si512(_mm512_srli_epi32(u1, 2), _mm512_set1_epi32(0x30303030)),
      _mm512_set1_epi32(0x0F0F0F0F), 0xEC);  // (u2 >> 4) & 0x0F.. | the high bits
  out[0] = _mm512_shuffle_epi8(m03, first_pair);
  out[1] = _mm512_shuffle_epi8(m03, second_pair);
  out[2] = _mm512_shuffle_epi8(m47, first_pair);
  out[3] = _mm512_shuffle_epi8(m47, second_pair);
}

template <bool kFifthBit, int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileQ4K(const uint8_t* row0, int64_t row_bytes,
                                                  int num_rows, int64_t blocks,
                                                  const GemvTokens& tok, float* y,
                                                  int64_t y_stride) {
  // d, dmin, scales[12], [qh[32]], qs[128]
  constexpr int64_t kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const int64_t ahead = NextTileDistance(row0, row_bytes);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  // Scale j as an int16 in both halves of the int32 lanes that need it (from byte j of
  // Q4KScalesMins).
  __m512i pick[4], bit[4];  // register k: lanes 0-7 its first sub-block's scale, 8-15 its second's
  for (int k = 0; k < 4; ++k) {
    const int first = 4 * (k / 2) + k % 2;
    pick[k] = PickInt16<true>([first](int j) { return j < 8 ? first : first + 2; });
    bit[k] = Halves(_mm256_set1_epi8(static_cast<char>(1 << first)),
                    _mm256_set1_epi8(static_cast<char>(1 << (first + 2))));
  }
  // The mins' int16 pairs: bytes 0, 1 (first_pair) or 2, 3 (second_pair) of each 32-bit lane.
  const __m512i first_pair = BytePairIndex(0), second_pair = BytePairIndex(2);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i a[T][4];
    alignas(16) int32_t sum_pairs[T][4];  // S_{2p} | S_{2p + 1} << 16 (int16 pairs), p < 4
    for (int t = 0; t < T; ++t) {
      const int8_t* ab = tok.Q(t) + 256 * b;
      a[t][0] = LoadHalves(ab, ab + 64);
      a[t][1] = LoadHalves(ab + 32, ab + 96);
      a[t][2] = LoadHalves(ab + 128, ab + 192);
      a[t][3] = LoadHalves(ab + 160, ab + 224);
      // S_j (the codes of sub-block j summed; |S_j| <= 32 * 127 fits int16), j < 8.
      const __m256i s8 = _mm256_madd_epi16(
          Load256(reinterpret_cast<const uint8_t*>(tok.Sums(t) + 16 * b)), _mm256_set1_epi16(1));
      const __m256i s16 = _mm256_packs_epi32(s8, s8);  // per 128-bit lane: S_{4l..4l+3} twice
      _mm_store_si128(reinterpret_cast<__m128i*>(sum_pairs[t]),
                      _mm256_castsi256_si128(_mm256_permute4x64_epi64(s16, 0x08)));
    }
    __m512i parts[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchAhead<3>(p, ahead);  // 144 or 176 bytes per step (the next block's: the rest)
      const __m512i sm = _mm512_castsi128_si512(Q4KScalesMins(p + 4));
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
      for (int k = 0; k < 4; ++k) scale[k] = _mm512_maskz_permutexvar_epi8(kLowBytes, pick[k], sm);
      for (int t = 0; t < T; ++t) {
        // Pairs of products (maddubs: |2 * 31 * 127| fits int16) times the scale of their
        // sub-block, summed into int32 lanes: all 16 lanes partial sums of I_b.
        __m512i sum = _mm512_madd_epi16(_mm512_maddubs_epi16(nib[0], a[t][0]), scale[0]);
        for (int k = 1; k < 4; ++k) {
          sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(nib[k], a[t][k]), scale[k]);
        }
        parts[t][i] = sum;
      }
    }
    const uint8_t* block0 = row0 + kBytes * b;
    const __m512i d_dmin = GatherWords(set, block0);
    const __m512 d = HalfOfWords(d_dmin, 0);
    const __m512 dmin = NegatedDmin(d_dmin);
    const __m512i u1 = GatherWords(set, block0 + 8), u2 = GatherWords(set, block0 + 12);
    __m512i min_pairs[4];
    Q4KMinPairs(u1, u2, first_pair, second_pair, min_pairs);
    for (int t = 0; t < T; ++t) {
      const auto [half0, half1] = ReduceBlockPairs(parts[t]);
      const __m512i ints = _mm512_add_epi32(half0, half1);
      __m512i mins = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        mins = _mm512_dpwssd_epi32(mins, min_pairs[p], _mm512_set1_epi32(sum_pairs[t][p]));
      }
      const __m512 xv = _mm512_set1_ps(tok.Dx(t)[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xv), _mm512_cvtepi32_ps(ints), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, xv), _mm512_cvtepi32_ps(mins), acc[t]);
    }
  }
  StoreRows<T>(acc, num_rows, y, y_stride);
}

// Lane j of the "lane order" of a tile holds row LaneRow(j) = 4 (j % 4) + j / 4: the order
// TransposeRowWords leaves (its own inverse).
inline constexpr int LaneRow(int j) { return 4 * (j % 4) + j / 4; }

// The 16 bytes at offset from each of the 16 rows, transposed: word w (w < 4) of row LaneRow(j)
// in lane j of raw[w]. Rows 4m .. 4m + 3 go to the 128-bit lanes of r[m] (broadcast loads and
// blends), then a 4 x 4 transposition of 32-bit words within the 128-bit lanes (cheaper than
// one gather per word).
KVSERVE_MATMUL_VNNI HWY_INLINE void TransposeRowWords(const GemvRowSet& set, int64_t offset,
                                                      __m512i (&raw)[4]) {
  __m512i r[4];
  for (int m = 0; m < 4; ++m) {
    auto row = [&](int i) HWY_ATTR {
      return _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(set.rows[4 * m + i] + offset)));
    };
    r[m] = _mm512_mask_blend_epi32(
        0xF000,
        _mm512_mask_blend_epi32(0x0F00, _mm512_mask_blend_epi32(0x00F0, row(0), row(1)), row(2)),
        row(3));
  }
  const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
  raw[0] = _mm512_unpacklo_epi64(t0, t2);
  raw[1] = _mm512_unpackhi_epi64(t0, t2);
  raw[2] = _mm512_unpacklo_epi64(t1, t3);
  raw[3] = _mm512_unpackhi_epi64(t1, t3);
}

// StoreRows for accumulators in lane order: lane i of y gets lane LaneRow(i) of acc[t].
template <int T>
HWY_INLINE void StoreLaneRows(const __m512 (&acc)[T], int num_rows, float* y, int64_t y_stride) {
  alignas(64) int32_t lane_row[kGemvRows];
  for (int j = 0; j < kGemvRows; ++j) lane_row[j] = LaneRow(j);
  const __m512i to_rows = _mm512_load_si512(lane_row);
  __m512 rows[T];
  for (int t = 0; t < T; ++t) rows[t] = _mm512_permutexvar_ps(to_rows, acc[t]);
  StoreRows<T>(rows, num_rows, y, y_stride);
}

// The code word (4 int8 codes) at a, broadcast to every int32 lane.
HWY_INLINE __m512i BroadcastCodes(const int8_t* a) {
  int32_t codes;
  std::memcpy(&codes, a, 4);
  return _mm512_set1_epi32(codes);
}

// scale[s] (s < 8): the Q4_K sub-block scale sc_s of each lane's row as an int32 lane, times 16
// for the low nibbles' (even) sub-blocks, from the scale field's words u0 (bytes 0-3) and u2
// (bytes 8-11): sc 0-3 = u0 & 0x3F..; sc 4-7 = (u2 & 0x0F..) | ((u0 >> 6) & 0x03..) << 4.
KVSERVE_MATMUL_VNNI HWY_INLINE void Q4KLaneScales(__m512i u0, __m512i u2, __m512i (&scale)[8]) {
  const __m512i sc03 = _mm512_and_si512(u0, _mm512_set1_epi32(0x3F3F3F3F));
  const __m512i sc47 = _mm512_ternarylogic_epi32(  // (u2 & 0x0F..) | ((u0 >> 2) & 0x30..)
      u2, _mm512_and_si512(_mm512_srli_epi32(u0, 2), _mm512_set1_epi32(0x30303030)),
      _mm512_set1_epi32(0x0F0F0F0F), 0xEC);
  for (int s = 0; s < 8; ++s) {
    const __m512i src = s < 4 ? sc03 : sc47;
    const int shift = 8 * (s % 4) - (s % 2 == 0 ? 4 : 0);
    const __m512i at = shift >= 0 ? _mm512_srli_epi32(src, static_cast<unsigned>(shift))
                                  : _mm512_slli_epi32(src, 4);
    scale[s] = _mm512_and_si512(at, _mm512_set1_epi32(s % 2 == 0 ? 0xFF0 : 0xFF));
  }
}

// Q4_K for 2 <= T tokens with one row per lane from the start (lane order), so no reduction
// per token: per block, the rows' header (d, dmin, the scale field) and qs are transposed 16
// bytes at a time (TransposeRowWords); word w of qs group g (qs bytes 16 g + 4 w ..) holds
// values 16 (g % 2) + 4 w .. + 3 of sub-block 2 (g / 2) in its low nibbles and of sub-block
// 2 (g / 2) + 1 in its high ones. Each token adds, per word, its 4 codes broadcast (dpbusd)
// times the low nibbles (& 0x0F) and times 16 x the high ones (& 0xF0: no shift), per
// sub-block S_s; then 16 I_b = sum_s (16 sc_s S_s (s even), sc_s 16 S_s (s odd)) (vpmulld;
// |16 I_b| <= 16 * 8 * 63 * 32 * 15 * 128 < 2^31), I_b = 16 I_b >> 4 exactly: the integer
// GemvTileQ4K forms, and its f32 chain (the mins as there).
template <int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileQ4KLanes(const uint8_t* row0, int64_t row_bytes,
                                                       int num_rows, int64_t blocks,
                                                       const GemvTokens& tok, float* y,
                                                       int64_t y_stride) {
  constexpr int64_t kBytes = 144, kQs = 16;  // d, dmin, scales[12], qs[128]
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const int64_t ahead = NextTileDistance(row0, row_bytes);
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  // The mins' int16 pairs: bytes 0, 1 (first_pair) or 2, 3 (second_pair) of each 32-bit lane.
  const __m512i first_pair = BytePairIndex(0), second_pair = BytePairIndex(2);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t block = kBytes * b;
    __m512i head[4];  // d | dmin << 16, scale bytes 0-3 (u0), 4-7 (u1), 8-11 (u2)
    TransposeRowWords(set, block, head);
    const __m512i u1 = head[2], u2 = head[3];
    __m512i scale[8];
    Q4KLaneScales(head[1], u2, scale);
    __m512i sum16[T];  // 16 I_b
    for (int t = 0; t < T; ++t) sum16[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {  // qs bytes 32 c ..: sub-blocks 2 c (low), 2 c + 1 (high)
      for (int i = 4 * c; i < 4 * c + 4; ++i) PrefetchAhead<3>(set.rows[i] + block, ahead);
      __m512i s_lo[T], s_hi[T];
      for (int t = 0; t < T; ++t) s_lo[t] = s_hi[t] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i raw[4];
        TransposeRowWords(set, block + kQs + 32 * c + 16 * h, raw);
        for (int w = 0; w < 4; ++w) {
          const __m512i lo = _mm512_and_si512(raw[w], low4), hi = _mm512_and_si512(raw[w], high4);
          for (int t = 0; t < T; ++t) {
            const int8_t* a = tok.Q(t) + 256 * b + 64 * c + 16 * h + 4 * w;
            s_lo[t] = _mm512_dpbusd_epi32(s_lo[t], lo, BroadcastCodes(a));
            s_hi[t] = _mm512_dpbusd_epi32(s_hi[t], hi, BroadcastCodes(a + 32));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        sum16[t] = _mm512_add_epi32(
            sum16[t], _mm512_add_epi32(_mm512_mullo_epi32(s_lo[t], scale[2 * c]),
                                       _mm512_mullo_epi32(s_hi[t], scale[2 * c + 1])));
      }
    }
    const __m512 d = HalfOfWords(head[0], 0);
    const __m512 dmin = NegatedDmin(head[0]);
    __m512i min_pairs[4];
    Q4KMinPairs(u1, u2, first_pair, second_pair, min_pairs);
    for (int t = 0; t < T; ++t) {
      // S_{2p} | S_{2p + 1} << 16 (int16 pairs; |S_j| <= 32 * 127 fits int16)
      const int16_t* sums = tok.Sums(t) + 16 * b;
      __m512i mins = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const int32_t lo = sums[4 * p] + sums[4 * p + 1], hi = sums[4 * p + 2] + sums[4 * p + 3];
        const int32_t pair = static_cast<int32_t>(
            static_cast<uint32_t>(static_cast<uint16_t>(lo)) | static_cast<uint32_t>(hi) << 16);
        mins = _mm512_dpwssd_epi32(mins, min_pairs[p], _mm512_set1_epi32(pair));
      }
      const __m512i ints = _mm512_srai_epi32(sum16[t], 4);
      const __m512 xv = _mm512_set1_ps(tok.Dx(t)[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xv), _mm512_cvtepi32_ps(ints), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, xv), _mm512_cvtepi32_ps(mins), acc[t]);
    }
  }
  StoreLaneRows<T>(acc, num_rows, y, y_stride);
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
  const int64_t ahead = NextTileDistance(row0, row_bytes);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  // qh >> shift01: the high bits of quad 0 (bytes 0-31) and 1 (bytes 32-63) of the 128-value
  // half at bits 0-1 of each byte, those of quads 2 and 3 at bits 4-5.
  const __m512i shift01 = Halves(_mm256_setzero_si256(), _mm256_set1_epi16(2));
  __m512i pick[4];  // register v: sub-blocks 4 v .. 4 v + 3, four int32 lanes each
  for (int v = 0; v < 4; ++v) pick[v] = PickInt16([v](int j) { return 4 * v + j / 4; });
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i a[T][4];
    __m512i bsums[T];  // the 16 code sums of 16 values, int16, upper half zero
    for (int t = 0; t < T; ++t) {
      for (int v = 0; v < 4; ++v) a[t][v] = _mm512_loadu_si512(tok.Q(t) + 256 * b + 64 * v);
      bsums[t] = _mm512_zextsi256_si512(
          Load256(reinterpret_cast<const uint8_t*>(tok.Sums(t) + 16 * b)));
    }
    __m512i parts[T][kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchAhead<4>(p, ahead);  // 210 bytes per step
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      const __m512i sc = _mm512_castsi256_si512(sc16);
      // -32 sc_s (|32 sc| <= 4096 fits int16) in int16 lanes s < 16, zero above.
      const __m512i minus32sc = _mm512_zextsi256_si512(
          _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
      __m512i u[4], scale[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(p + 64 * h);
        const __m512i qh =
            _mm512_srlv_epi16(_mm512_broadcast_i64x4(Load256(p + 128 + 32 * h)), shift01);
        // u = nibble | high bits << 4 (ternary logic 0xF8: a | (b & c))
        const __m512i lo_nib = _mm512_and_si512(ql, low4);
        const __m512i hi_nib = _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4);
        u[2 * h] = _mm512_ternarylogic_epi32(lo_nib, _mm512_slli_epi16(qh, 4), bits45, 0xF8);
        u[2 * h + 1] = _mm512_ternarylogic_epi32(hi_nib, qh, bits45, 0xF8);
      }
      for (int v = 0; v < 4; ++v) scale[v] = _mm512_permutexvar_epi8(pick[v], sc);
      for (int t = 0; t < T; ++t) {
        // pairs of products (maddubs: |2 * 63 * 127| fits int16) times their sub-block's scale
        __m512i sum = _mm512_madd_epi16(_mm512_maddubs_epi16(u[0], a[t][0]), scale[0]);
        for (int v = 1; v < 4; ++v) {
          sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(u[v], a[t][v]), scale[v]);
        }
        // minus 32 sum_s sc_s S_s (pairs of sub-blocks per int32 lane)
        parts[t][i] = _mm512_dpwssd_epi32(sum, minus32sc, bsums[t]);
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

// Batches of at most this many tokens of format t take the gemv rows (GemvRows); 0: t has
// none. Measured against the token-group tiles that MatMul runs for more tokens (AMX from 16),
// one thread, expert-sized matrices (BM_ExpertMatMul in bench/matmul_bench.cc,
// docs/PERFORMANCE.md): the K formats cross over at about 12 tokens, Q8_0 (one dpbusd per 64
// values between reductions) at about 8. MXFP4 (matmul_x86_gemv_mxfp4-inl.h: passes of up to 8
// tokens over each tile) beats the row tiles up to AMX's 16 (gpt-oss small's experts, one
// thread: 1.5x at 2 tokens, 1.7-1.8x at 6-8; 8 tokens cost 3x one).
constexpr int GemvMaxTokens(tensor::DType t) {
  using tensor::DType;
  if (t == DType::kQ8_0) return 8;
  if (t == DType::kMXFP4) return 15;
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
    } else if constexpr (kType == DType::kQ4_K && T >= 2) {
      GemvTileQ4KLanes<T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    } else if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
      GemvTileQ4K<kType == DType::kQ5_K, T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    } else {
      static_assert(kType == DType::kQ6_K);
      GemvTileQ6K<T>(row0, row_bytes, num_rows, blocks, tok, y + r, w.rows);
    }
  }
}

// Rows [row_begin, row_end) of a kHasGemv format for tokens [0, n), n <= GemvMaxTokens(kType):
// one pass over the rows for all n tokens (MXFP4: GemvRowsMxfp4, which QuantRows calls).
template <tensor::DType kType, int T = kGemvMaxTokens>
KVSERVE_MATMUL_VNNI void GemvRows(const WeightMatrix& w, const internal::QuantActivations& act,
                                  int64_t n, float* y, int64_t row_begin, int64_t row_end) {
  if constexpr (T >= 1) {
    if (n < T) return GemvRows<kType, T - 1>(w, act, n, y, row_begin, row_end);
    const GemvTokens tok{act.q, act.d, act.sums, w.cols, w.cols / QuantTraits<kType>::kBlock};
    GemvRowsT<kType, T>(w, tok, y, row_begin, row_end);
  }
}
