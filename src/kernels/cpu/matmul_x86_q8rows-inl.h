// Q8_0 rows: GemvMaxTokens(kQ8_0) + 1 to kQ8RowsMaxTokens tokens of Q8_0 weights on AVX-512
// VNNI without AMX (a batched decode step's dense matrices: gpt-oss's attention projections and
// output matrix at 16 sequences). Textually included by matmul_x86_quant-inl.h for the AVX3_DL
// target only, after matmul_x86_vnni-inl.h (token groups) and matmul_x86_gemv-inl.h (prefetch);
// see matmul.h for the scheme.
//
// The token-group tiles (matmul_x86_vnni-inl.h) first decode 4 rows into a per-thread buffer
// (DecodeRows: u8 = code + 128) and then read them back; at 16 tokens that pass costs more than
// the products. Here the weights are read in place: per row and 4 values, the block's 4 raw
// codes are broadcast (one load), flipped to u = q + 128 (one xor) and multiplied by the
// token-interleaved codes of 16 tokens (internal::TokenGroups, dpbusd), so each token's own
// int32 lane accumulates its (row, token) sum with no reduction across lanes. Per row and
// block, starting from the correction:
//   I_b = -128 S_b + sum_{i < 32} (q_i + 128) a_i      (exact; S_b the token's code sum)
// then the scheme's f32 chain, block after block: acc = fma(d_b * dx_b, float(I_b), acc). The
// integers are the exact ones every path forms and the chain is the scheme's, so a token's y
// is the same alone, in any batch, pass or path.
//
// A tile is 8 rows (one group of 16 tokens) or 12 (more); its first token pass streams them
// from memory while asking for the next tile's (PrefetchAhead), the other passes read them
// from L1. A pass takes one group over 8 rows (Q8Tile<8, 1>) or 6, or two groups over 6 rows
// at a time (Q8Tile<6, 2>): 2 R G accumulators plus the codes stay in the 32 registers.

// Most tokens the Q8_0 rows take; more go to the token-group tiles.
inline constexpr int kQ8RowsMaxTokens = 64;

inline constexpr int64_t kQ8BlockBytes = 34;  // f16 d, then 32 int8 codes

// The token groups of one pass: codes, block scales and code sums of each group (TokenGroups).
template <int G>
struct Q8Groups {
  const uint8_t* q[G];
  const float* dx[G];
  const int32_t* sums[G];
};

// y[t, r] for the R rows from row0 (row_bytes apart) and the 16 G tokens of groups (group g:
// tokens t0 + 16 g .., those < t_end stored); rows r >= num_rows are computed (from row 0) and
// not stored. prefetch_distance: bytes from each row to the row read a tile later (asked for,
// block by block), or 0 for none.
template <int R, int G>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void Q8Tile(const uint8_t* row0, int64_t row_bytes, int num_rows,
                                             int64_t blocks, const Q8Groups<G>& groups,
                                             int64_t t0, int64_t t_end, int64_t prefetch_distance,
                                             float* y, int64_t y_stride) {
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = row0 + (r < num_rows ? r : 0) * row_bytes;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][G];
  // Unrolled: as a loop GCC turns the zeroing into a memset of a stack copy (rep stos: 7% of a
  // 16-token tile on AMD Zen 5).
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t b = 0;
  do {  // blocks >= 1
    const int64_t offset = kQ8BlockBytes * b;
    if (prefetch_distance != 0) {
      // the line holding the block's last byte: every line of a row holds some block's last byte
      for (int r = 0; r < R; ++r) PrefetchAhead<1>(rows[r] + offset + kQ8BlockBytes - 1, prefetch_distance);
    }
    __m512i ints[R][G];
    for (int g = 0; g < G; ++g) {
      const __m512i s = _mm512_add_epi32(_mm512_loadu_si512(groups.sums[g] + 32 * b),
                                         _mm512_loadu_si512(groups.sums[g] + 32 * b + 16));
      const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7));
      for (int r = 0; r < R; ++r) ints[r][g] = corr;  // -128 S_b
    }
    for (int k = 0; k < 8; ++k) {
      __m512i a[G];
      for (int g = 0; g < G; ++g) a[g] = GroupCodes(groups.q[g], 8 * b + k);
      for (int r = 0; r < R; ++r) {
        const __m512i u = _mm512_xor_si512(BroadcastWeights(rows[r] + offset + 2 + 4 * k), flip);
        for (int g = 0; g < G; ++g) ints[r][g] = _mm512_dpbusd_epi32(ints[r][g], u, a[g]);
      }
    }
    for (int r = 0; r < R; ++r) {
      uint16_t h;
      std::memcpy(&h, rows[r] + offset, 2);
      const __m512 dw = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(h)));
      for (int g = 0; g < G; ++g) {
        const __m512 sd = _mm512_mul_ps(dw, _mm512_loadu_ps(groups.dx[g] + 16 * b));
        acc[r][g] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(ints[r][g]), acc[r][g]);
      }
    }
  } while (++b < blocks);
  alignas(64) float out[R][G][16];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) _mm512_store_ps(out[r][g], acc[r][g]);
  for (int g = 0; g < G; ++g) {  // token by token: each token's rows are adjacent in y
    const int64_t first = t0 + 16 * g;
    const int count = static_cast<int>(std::min<int64_t>(16, t_end - first));
    for (int j = 0; j < count; ++j) {
      float* yt = y + (first + j) * y_stride;
      if (num_rows == R) {
        for (int r = 0; r < R; ++r) yt[r] = out[r][g][j];
      } else {
        for (int r = 0; r < num_rows; ++r) yt[r] = out[r][g][j];
      }
    }
  }
}

// The pass's groups from group `group` of act's token groups.
template <int G>
HWY_INLINE Q8Groups<G> MakeQ8Groups(const internal::QuantActivations& act,
                                    const internal::TokenGroups& layout, int64_t group) {
  Q8Groups<G> out;
  for (int g = 0; g < G; ++g) {
    out.q[g] = act.staging + layout.QOffset(group + g);
    out.dx[g] = reinterpret_cast<const float*>(act.staging + layout.DOffset(group + g));
    out.sums[g] = reinterpret_cast<const int32_t*>(act.staging + layout.SumsOffset(group + g));
  }
  return out;
}

// Q8Tile<R, G> over the num_rows rows from row0, R at a time (y: row0's column of y).
template <int R, int G>
HWY_INLINE void Q8SubTiles(const uint8_t* row0, int64_t row_bytes, int num_rows, int64_t blocks,
                           const Q8Groups<G>& groups, int64_t t0, int64_t t_end,
                           int64_t prefetch_distance, float* y, int64_t y_stride) {
  for (int i = 0; i < num_rows; i += R) {
    Q8Tile<R, G>(row0 + i * row_bytes, row_bytes, std::min(R, num_rows - i), blocks, groups, t0,
                 t_end, prefetch_distance, y + i, y_stride);
  }
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) (t_begin a multiple of 16) of n <=
// kQ8RowsMaxTokens Q8_0 tokens whose token groups act.staging holds. One group of 16 tokens:
// tiles of 8 rows (Q8Tile<8, 1>); more: tiles of 12 rows, the groups two at a time over 6 rows
// (Q8Tile<6, 2>), an odd last group over 6 rows (Q8Tile<6, 1>). Measured on AMD Zen 5 (1 thread,
// 2048 x 1024): 12 rows of one group spill registers (16 tokens 1.3x slower), 6 rows of two
// groups are 1.12-1.16x faster than 4.
KVSERVE_MATMUL_VNNI inline void Q8Rows(const WeightMatrix& w, const internal::QuantActivations& act,
                                       int64_t n, float* y, int64_t row_begin, int64_t row_end,
                                       int64_t t_begin, int64_t t_end) {
  const int64_t cols = w.cols, blocks = cols / 32;
  const int64_t row_bytes = tensor::RowBytes(tensor::DType::kQ8_0, cols);
  const internal::TokenGroups layout{cols, 32, (n + 15) / 16};
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t g_begin = t_begin / 16, g_end = (t_end + 15) / 16;
  const bool one_group = g_end - g_begin == 1;
  const int64_t tile_rows = one_group ? 8 : 12;
  for (int64_t r = row_begin; r < row_end; r += tile_rows) {
    const int num_rows = static_cast<int>(std::min(tile_rows, row_end - r));
    const uint8_t* row0 = base + r * row_bytes;
    for (int64_t g = g_begin; g < g_end;) {
      // the first pass streams the tile in and asks for the next one
      const int64_t distance = g == g_begin ? tile_rows * row_bytes : 0;
      const int64_t t0 = 16 * g;
      if (g + 1 < g_end) {
        Q8SubTiles<6, 2>(row0, row_bytes, num_rows, blocks, MakeQ8Groups<2>(act, layout, g), t0,
                         t_end, distance, y + r, w.rows);
        g += 2;
      } else if (one_group) {
        Q8SubTiles<8, 1>(row0, row_bytes, num_rows, blocks, MakeQ8Groups<1>(act, layout, g), t0,
                         t_end, distance, y + r, w.rows);
        g += 1;
      } else {
        Q8SubTiles<6, 1>(row0, row_bytes, num_rows, blocks, MakeQ8Groups<1>(act, layout, g), t0,
                         t_end, distance, y + r, w.rows);
        g += 1;
      }
    }
  }
}
