// AVX-512 VNNI token-group tiles for the integer formats. Textually included by
// matmul_x86_quant-inl.h for the AVX3_DL target only; see matmul.h for the scheme.
//
// Batches read the token-interleaved activations of internal::TokenGroups: one 512-bit
// register holds 4 consecutive codes of 16 tokens, so a weight group of 4 (u8, broadcast)
// times that register (dpbusd) adds 4 products to each token's own int32 lane: every lane
// accumulates one (row, token) sum with no reduction across lanes. Per weight row and block:
//   32-value formats: I_b = sum(u a) - 128 S_b   (u = value + 128)
//   K formats, per sub-block j of 16 or 32 values: P_j = sum(u a) - offset S_j, then
//     I_b = sum_j sc_j P_j (mullo), M_b = sum_j m_j S_j
// and the f32 chain of the scheme, 16 tokens per register. A tile is R = 4 rows x G token
// groups (G <= 2).

inline constexpr int64_t kTokenGroupMinTokens = 4;

// Activation register k (codes 4k .. 4k + 3 of 16 tokens) of a group.
KVSERVE_MATMUL_VNNI HWY_INLINE __m512i GroupCodes(const uint8_t* q, int64_t k) {
  return _mm512_loadu_si512(q + 64 * k);
}

KVSERVE_MATMUL_VNNI HWY_INLINE __m512i BroadcastWeights(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc[r][g] += sum over the `len` values from value `first` of decoded row r (u8) times the
// group codes (dpbusd; len a multiple of 4).
template <int R, int G>
KVSERVE_MATMUL_VNNI HWY_INLINE void GroupDots(const DecodedRows& dec, int64_t cols,
                                              const uint8_t* const (&q)[G], int64_t first,
                                              int len, __m512i (&acc)[R][G]) {
  for (int k = 0; k < len / 4; ++k) {
    __m512i a[G];
    for (int g = 0; g < G; ++g) a[g] = GroupCodes(q[g], first / 4 + k);
    for (int r = 0; r < R; ++r) {
      const __m512i w = BroadcastWeights(dec.vals + r * cols + first + 4 * k);
      for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], w, a[g]);
    }
  }
}

// The exact I_b (and M_b) of block b for R rows x G groups of 16 tokens.
template <tensor::DType kType, int R, int G>
KVSERVE_MATMUL_VNNI HWY_INLINE void GroupBlockInts(const DecodedRows& dec, int64_t cols, int64_t b,
                                                   const uint8_t* const (&q)[G],
                                                   const int32_t* const (&sums)[G],
                                                   __m512i (&ints)[R][G], __m512i (&mins)[R][G]) {
  using Traits = QuantTraits<kType>;
  const int64_t sub_stride = cols / 16;
  auto sum16 = [&](int g, int64_t k) { return _mm512_loadu_si512(sums[g] + 16 * k); };
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) ints[r][g] = mins[r][g] = _mm512_setzero_si512();
  if constexpr (!Traits::kK) {
    GroupDots<R, G>(dec, cols, q, 32 * b, 32, ints);
    for (int g = 0; g < G; ++g) {
      const __m512i s = _mm512_add_epi32(sum16(g, 2 * b), sum16(g, 2 * b + 1));
      const __m512i corr = _mm512_slli_epi32(s, 7);  // 128 S_b
      for (int r = 0; r < R; ++r) {
        ints[r][g] = _mm512_sub_epi32(ints[r][g], corr);
        if constexpr (Traits::kHasMin) mins[r][g] = s;
      }
    }
    return;
  } else {
    constexpr int kSub = kType == tensor::DType::kQ2_K || kType == tensor::DType::kQ3_K ||
                                 kType == tensor::DType::kQ6_K
                             ? 16
                             : 32;
    for (int j = 0; j < 256 / kSub; ++j) {
      __m512i p[R][G];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) p[r][g] = _mm512_setzero_si512();
      GroupDots<R, G>(dec, cols, q, 256 * b + kSub * j, kSub, p);
      const int64_t k16 = 16 * b + j * kSub / 16;  // first 16-value group of the sub-block
      for (int g = 0; g < G; ++g) {
        const __m512i s = kSub == 16 ? sum16(g, k16) : _mm512_add_epi32(sum16(g, k16), sum16(g, k16 + 1));
        [[maybe_unused]] __m512i corr;
        if constexpr (Traits::kOffset != 0) corr = _mm512_mullo_epi32(s, _mm512_set1_epi32(Traits::kOffset));
        for (int r = 0; r < R; ++r) {
          const int16_t* sc = dec.sc16 + r * sub_stride + k16;
          __m512i pj = p[r][g];
          if constexpr (Traits::kOffset != 0) pj = _mm512_sub_epi32(pj, corr);
          ints[r][g] = _mm512_add_epi32(ints[r][g], _mm512_mullo_epi32(pj, _mm512_set1_epi32(sc[0])));
          if constexpr (Traits::kHasMin) {
            const int16_t* mn = dec.mn16 + r * sub_stride + k16;
            mins[r][g] = _mm512_add_epi32(mins[r][g], _mm512_mullo_epi32(s, _mm512_set1_epi32(mn[0])));
          }
        }
      }
    }
  }
}

// y for R rows x G groups of 16 tokens (first token t0 of group 0), tokens < n only.
template <tensor::DType kType, int R, int G>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void GroupTile(const DecodedRows& dec, int64_t cols,
                                                const internal::TokenGroups& layout,
                                                const uint8_t* staging, int64_t group, int64_t n,
                                                float* y, int64_t y_stride, int num_rows) {
  using Traits = QuantTraits<kType>;
  const int64_t blocks = cols / Traits::kBlock;
  const uint8_t* q[G];
  const float* dx[G];
  const int32_t* sums[G];
  for (int g = 0; g < G; ++g) {
    q[g] = staging + layout.QOffset(group + g);
    dx[g] = reinterpret_cast<const float*>(staging + layout.DOffset(group + g));
    sums[g] = reinterpret_cast<const int32_t*>(staging + layout.SumsOffset(group + g));
  }
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i ints[R][G], mins[R][G];
    GroupBlockInts<kType, R, G>(dec, cols, b, q, sums, ints, mins);
    for (int g = 0; g < G; ++g) {
      const __m512 xv = _mm512_loadu_ps(dx[g] + 16 * b);
      for (int r = 0; r < R; ++r) {
        const __m512 sd = _mm512_mul_ps(_mm512_set1_ps(dec.d[b * R + r]), xv);
        acc[r][g] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(ints[r][g]), acc[r][g]);
        if constexpr (Traits::kHasMin) {
          const __m512 sm = _mm512_mul_ps(_mm512_set1_ps(dec.dmin[b * R + r]), xv);
          acc[r][g] = _mm512_fmadd_ps(sm, _mm512_cvtepi32_ps(mins[r][g]), acc[r][g]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < num_rows; ++r) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[r][g]);
      const int64_t t0 = 16 * (group + g);
      for (int j = 0; j < 16 && t0 + j < n; ++j) y[(t0 + j) * y_stride + r] = out[j];
    }
  }
}

// Tokens [t_begin, t_end) (t_begin a multiple of 16) of the decoded R rows, two groups at a time.
template <tensor::DType kType, int R>
void GroupRows(const DecodedRows& dec, int64_t cols, const internal::QuantActivations& act,
               const internal::TokenGroups& layout, int64_t t_begin, int64_t t_end, float* y,
               int64_t y_stride, int num_rows) {
  const int64_t g_end = (t_end + 15) / 16;
  for (int64_t g = t_begin / 16; g < g_end; g += 2) {
    if (g + 1 < g_end) {
      GroupTile<kType, R, 2>(dec, cols, layout, act.staging, g, t_end, y, y_stride, num_rows);
    } else {
      GroupTile<kType, R, 1>(dec, cols, layout, act.staging, g, t_end, y, y_stride, num_rows);
    }
  }
}
