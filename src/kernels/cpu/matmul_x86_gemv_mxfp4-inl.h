// Single-token (decode) rows for MXFP4 weights on AVX-512 VNNI (gpt-oss's experts). Textually
// included by matmul_x86_quant-inl.h for the AVX3_DL target only, after matmul_x86_gemv-inl.h,
// whose 16-row machinery (GemvRowSet, ReduceBlockPairs, PrefetchAhead) it reuses; see
// matmul.h for the scheme.
//
// MXFP4 block (tensor/quant_ints.h): e (E8M0) at byte 0, then 16 bytes of nibbles in nibble
// order; q = kMxfp4Values[nibble] in -12..12, d = 2^(e - 128). The file's blocks are read in
// place, 16 rows at a time, one block pair (b, b + 1) = 34 bytes per row and step:
//   one masked load of the pair's 34 bytes; vpermb arranges the four 128-bit lanes as
//   [qs_b, qs_b, qs_b1, qs_b1], a per-lane 16-bit shift by (0, 4, 0, 4) brings the high nibbles
//   down, and a second vpermb looks up u = q + 128 in a 64-entry table that repeats the 16
//   values (vpermb reads 6 index bits, so the bits above the nibble never matter). The lanes
//   then hold values 0-15, 16-31 of block b and 0-15, 16-31 of block b + 1: exactly the order
//   of the 64 activation codes of the pair, so one dpbusd gives lanes 0-7 partial sums of block
//   b and lanes 8-15 of block b + 1 (each product |u a| <= 140 * 127: no saturation).
//   ReduceBlockPairs turns the 16 rows' registers into I_b + 128 S_b with lane i = row i; the
//   rows' scale bytes are gathered and widened to 2^(e - 128) exactly (subnormal for e < 2, as
//   tensor::Mxfp4Scale), and acc = fma(d_b * dx_b, float(I_b), acc): the scheme's f32 chain.
// A few tokens (a mixture of experts' batched step: 1-3 per expert at 16 sequences) take
// GemvTileMxfp4Lanes instead, which transposes the rows' nibble words so that each lane holds
// one row from the start: each token then costs 8 dpbusd per block and no reduction.

// The 16 rows' d_b = 2^(e - 128) for the scale bytes at block0 + each row's offset.
KVSERVE_MATMUL_VNNI HWY_INLINE __m512 GatherMxfp4Scales(const GemvRowSet& set,
                                                        const uint8_t* block0) {
  const __m512i e = _mm512_and_si512(_mm512_i32gather_epi32(set.offsets, block0, 1),
                                     _mm512_set1_epi32(0xFF));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 tiny = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, subnormal));
}

// y[t * y_stride + i] for rows i < num_rows of the 16 MXFP4 rows from row0 (row_bytes apart)
// and T tokens: q, dx, sums the first token's activation codes, block scales and code sums of
// each 16 (matmul.h), the next token's `cols` codes further on. A block pair's values are formed
// once for the T tokens; each token then takes its own dpbusd, reduction and fma chain.
template <int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileMxfp4(const uint8_t* row0, int64_t row_bytes,
                                                    int num_rows, int64_t cols, const int8_t* q,
                                                    const float* dx, const int16_t* sums,
                                                    float* y, int64_t y_stride) {
  constexpr int64_t kBytes = 17;  // e, then 16 bytes of nibbles
  const int64_t blocks = cols / 32;
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const int64_t ahead = NextTileDistance(row0, row_bytes);
  alignas(64) uint8_t arrange[64], table[64];
  for (int j = 0; j < 64; ++j) {
    arrange[j] = static_cast<uint8_t>((j < 32 ? 1 : 1 + kBytes) + j % 16);
    table[j] = static_cast<uint8_t>(tensor::kMxfp4Values[j % 16] + 128);
  }
  const __m512i arrange_v = _mm512_load_si512(arrange);
  const __m512i table_v = _mm512_load_si512(table);
  // 16-bit shift counts: 128-bit lanes 1 and 3 take the high nibbles.
  const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                         0x0004000400040004, 0x0004000400040004, 0, 0);
  __m512 acc[T];
  for (auto& a : acc) a = _mm512_setzero_ps();
  auto values = [&](const uint8_t* p, __mmask64 bytes) HWY_ATTR {
    const __m512i raw = _mm512_maskz_loadu_epi8(bytes, p);
    const __m512i nibbles = _mm512_srlv_epi16(_mm512_permutexvar_epi8(arrange_v, raw), shift);
    return _mm512_permutexvar_epi8(nibbles, table_v);  // u = q + 128
  };
  auto finish = [&](int t, int64_t b, __m512 d, __m512i ints) HWY_ATTR {
    const int16_t* s = sums + t * (cols / 16);
    const int32_t block_sum = int32_t{s[2 * b]} + s[2 * b + 1];
    ints = _mm512_sub_epi32(ints, _mm512_set1_epi32(128 * block_sum));
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx[t * blocks + b])),
                             _mm512_cvtepi32_ps(ints), acc[t]);
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    __m512i u[kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) {
      const uint8_t* p = set.rows[i] + kBytes * b;
      PrefetchAhead<1>(p, ahead);  // 34 bytes per step
      u[i] = values(p, (1ull << 34) - 1);
    }
    const __m512 d0 = GatherMxfp4Scales(set, row0 + kBytes * b);
    const __m512 d1 = GatherMxfp4Scales(set, row0 + kBytes * (b + 1));
    for (int t = 0; t < T; ++t) {
      const __m512i a = _mm512_loadu_si512(q + t * cols + 32 * b);
      __m512i dots[kGemvRows];
      for (int i = 0; i < kGemvRows; ++i) dots[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[i], a);
      const auto [first, second] = ReduceBlockPairs(dots);
      finish(t, b, d0, first);
      finish(t, b + 1, d1, second);
    }
  }
  if (b < blocks) {  // an odd last block: the upper half's codes are zero
    __m512i u[kGemvRows];
    for (int i = 0; i < kGemvRows; ++i) u[i] = values(set.rows[i] + kBytes * b, (1ull << 17) - 1);
    const __m512 d = GatherMxfp4Scales(set, row0 + kBytes * b);
    for (int t = 0; t < T; ++t) {
      const __m512i a = _mm512_zextsi256_si512(
          Load256(reinterpret_cast<const uint8_t*>(q + t * cols + 32 * b)));
      __m512i dots[kGemvRows];
      for (int i = 0; i < kGemvRows; ++i) dots[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[i], a);
      finish(t, b, d, ReduceBlockPairs(dots).first);
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(y + t * y_stride, static_cast<__mmask16>((1u << num_rows) - 1), acc[t]);
  }
}

// y[t * y_stride + i] as GemvTileMxfp4 for 2 <= T <= 8 tokens, with one row per lane from the
// start, so no reduction per token: per block, the 16 rows' nibble words 4g .. 4g + 3 (g < 4)
// are transposed into one register each; their low nibbles (values 4g .. 4g + 3) and high
// nibbles (16 + 4g ..) become u = q + 128 by the vpermb lookup, and each token adds, per
// register, its 4 codes broadcast (dpbusd): 8 dpbusd give I_b + 128 S_b, one row per lane.
template <int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GemvTileMxfp4Lanes(const uint8_t* row0, int64_t row_bytes,
                                                         int num_rows, int64_t cols,
                                                         const int8_t* q, const float* dx,
                                                         const int16_t* sums, float* y,
                                                         int64_t y_stride) {
  constexpr int64_t kBytes = 17;
  const int64_t blocks = cols / 32;
  const GemvRowSet set = MakeRowSet(row0, row_bytes, num_rows);
  const int64_t ahead = NextTileDistance(row0, row_bytes);
  alignas(64) uint8_t table[64];
  for (int j = 0; j < 64; ++j) table[j] = static_cast<uint8_t>(tensor::kMxfp4Values[j % 16] + 128);
  const __m512i table_v = _mm512_load_si512(table);
  // The scales gathered in lane order (TransposeRowWords), y stored back in row order.
  alignas(64) int32_t lane_offsets[kGemvRows], row_offsets[kGemvRows];
  _mm512_store_si512(row_offsets, set.offsets);
  for (int j = 0; j < kGemvRows; ++j) lane_offsets[j] = row_offsets[LaneRow(j)];
  GemvRowSet lanes = set;
  lanes.offsets = _mm512_load_si512(lane_offsets);
  __m512 acc[T];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block0 = row0 + kBytes * b;
    if (b % 2 == 0) {
      for (int i = 0; i < kGemvRows; ++i) PrefetchAhead<1>(set.rows[i] + kBytes * b, ahead);
    }
    // The 16 rows' nibble words, word g of row LaneRow(j) in lane j of raw[g].
    __m512i raw[4];
    TransposeRowWords(set, kBytes * b + 1, raw);
    __m512i u[8];  // u[g]: values 4g .. 4g + 3, u[4 + g]: values 16 + 4g .., lanes as raw's
    for (int g = 0; g < 4; ++g) {
      u[g] = _mm512_permutexvar_epi8(raw[g], table_v);
      u[4 + g] = _mm512_permutexvar_epi8(_mm512_srli_epi32(raw[g], 4), table_v);
    }
    const __m512 d = GatherMxfp4Scales(lanes, block0);
    for (int t = 0; t < T; ++t) {
      const int8_t* a = q + t * cols + 32 * b;
      // Two dpbusd chains (values 0-15 and 16-31), half the latency of one.
      __m512i low = _mm512_setzero_si512(), high = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        low = _mm512_dpbusd_epi32(low, u[g], BroadcastCodes(a + 4 * g));
        high = _mm512_dpbusd_epi32(high, u[4 + g], BroadcastCodes(a + 16 + 4 * g));
      }
      __m512i ints = _mm512_add_epi32(low, high);
      const int16_t* s = sums + t * (cols / 16);
      ints = _mm512_sub_epi32(ints, _mm512_set1_epi32(128 * (int32_t{s[2 * b]} + s[2 * b + 1])));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx[t * blocks + b])),
                               _mm512_cvtepi32_ps(ints), acc[t]);
    }
  }
  StoreLaneRows<T>(acc, num_rows, y, y_stride);
}

// Tokens per pass of GemvRowsMxfp4 over a 16-row tile.
inline constexpr int64_t kGemvMxfp4PassTokens = 8;
// y[t, r] for rows [row_begin, row_end) and tokens [t_begin, t_end) of an MXFP4 matrix, 16 rows
// at a time: one token by GemvTileMxfp4, more by GemvTileMxfp4Lanes, up to kGemvMxfp4PassTokens
// per pass (the tile stays in L1 between passes).
KVSERVE_MATMUL_VNNI inline void GemvRowsMxfp4(const WeightMatrix& w,
                                              const internal::QuantActivations& act, float* y,
                                              int64_t row_begin, int64_t row_end, int64_t t_begin,
                                              int64_t t_end) {
  const int64_t cols = w.cols;
  const int64_t row_bytes = tensor::RowBytes(tensor::DType::kMXFP4, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kGemvRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kGemvRows, row_end - r));
    for (int64_t t = t_begin; t < t_end; t += kGemvMxfp4PassTokens) {
      const int64_t count = std::min<int64_t>(kGemvMxfp4PassTokens, t_end - t);
      const int8_t* q = act.q + t * cols;
      const float* dx = act.d + t * (cols / 32);
      const int16_t* sums = act.sums + t * (cols / 16);
      float* yt = y + t * w.rows + r;
      using Tile = void (*)(const uint8_t*, int64_t, int, int64_t, const int8_t*, const float*,
                            const int16_t*, float*, int64_t);
      static constexpr Tile kTiles[kGemvMxfp4PassTokens] = {
          &GemvTileMxfp4<1>,      &GemvTileMxfp4Lanes<2>, &GemvTileMxfp4Lanes<3>,
          &GemvTileMxfp4Lanes<4>, &GemvTileMxfp4Lanes<5>, &GemvTileMxfp4Lanes<6>,
          &GemvTileMxfp4Lanes<7>, &GemvTileMxfp4Lanes<8>};
      Tile tile = kTiles[count - 1];
      tile(base + r * row_bytes, row_bytes, num_rows, cols, q, dx, sums, yt, w.rows);
    }
  }
}
