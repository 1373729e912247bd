// x86 Q8_0 / Q4_0 MatMul tiles. Textually included by matmul_x86-inl.h (per x86 target).
//
// Per weight block b and 4-column group g the exact int32 p[b][g] = sum w * q is formed by
// the sign trick: maddubs(|w| as u8, q * sign(w) as s8) gives int16 pair sums (at most
// 2 * 128 * 127 = 32512, so no saturation: activations are in [-127, 127]), then madd with
// ones sums pairs into int32. Virtual lane 8 * (b % 2) + g accumulates
// fma(dw * dx, float(p[b][g]), lane), as in matmul.h.

#if HWY_TARGET == HWY_AVX2

// Adds block b (virtual lanes 8 * kParity .. + 7, register kParity) of an R x T tile.
template <tensor::DType kType, int R, int T, int kParity>
HWY_INLINE void QuantBlockStep(const uint8_t* w, int64_t w_stride, const int8_t* qx,
                               const float* dx, int64_t cols, int64_t b, VF (&acc)[R][T][kVecs]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i wq[R], aw[R];
  float dw[R];
  for (int r = 0; r < R; ++r) {
    const uint8_t* block = w + r * w_stride + b * kBlockBytes<kType>;
    wq[r] = LoadBlock<kType>(block);
    aw[r] = _mm256_abs_epi8(wq[r]);
    dw[r] = BlockScale(block);
  }
  for (int t = 0; t < T; ++t) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + t * cols + 32 * b));
    const float dxt = dx[t * (cols / 32) + b];
    for (int r = 0; r < R; ++r) {
      const __m256i sx = _mm256_sign_epi8(xq, wq[r]);
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], sx), ones);
      acc[r][t][kParity] =
          _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dxt), _mm256_cvtepi32_ps(p), acc[r][t][kParity]);
    }
  }
}

// y[t, r] for an R x T tile of quantized weights. qx: T rows of `cols` int8; dx: T rows of
// cols / 32 scales; y rows y_stride apart.
template <tensor::DType kType, int R, int T>
HWY_NOINLINE void QuantTile(const uint8_t* w, int64_t w_stride, int64_t cols, const int8_t* qx,
                            const float* dx, float* y, int64_t y_stride) {
  VF acc[R][T][kVecs];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = Zero();
  const int64_t num_blocks = cols / 32;
  int64_t b = 0;
  for (; b + 1 < num_blocks; b += 2) {
    QuantBlockStep<kType, R, T, 0>(w, w_stride, qx, dx, cols, b, acc);
    QuantBlockStep<kType, R, T, 1>(w, w_stride, qx, dx, cols, b + 1, acc);
  }
  if (b < num_blocks) QuantBlockStep<kType, R, T, 0>(w, w_stride, qx, dx, cols, b, acc);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = ReduceVirtual(acc[r][t]);
}

#else  // AVX-512: one register = blocks b (lanes 0-7) and b + 1 (lanes 8-15).

// [a x 8, b x 8]
HWY_INLINE __m512 SplitScale(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// Adds blocks b and b + 1 (b + 1 only when `pair`; otherwise its lanes get + 0 * 0).
template <tensor::DType kType, int R, int T>
HWY_INLINE void QuantPairStep(const uint8_t* w, int64_t w_stride, const int8_t* qx, const float* dx,
                              int64_t cols, int64_t b, bool pair, VF (&acc)[R][T][kVecs]) {
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i zero = _mm512_setzero_si512();
  __m512i aw[R];
  __mmask64 neg[R];
  __m512 dw[R];
  for (int r = 0; r < R; ++r) {
    const uint8_t* block = w + r * w_stride + b * kBlockBytes<kType>;
    const __m256i lo = LoadBlock<kType>(block);
    const __m256i hi = pair ? LoadBlock<kType>(block + kBlockBytes<kType>) : _mm256_setzero_si256();
    const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    aw[r] = _mm512_abs_epi8(wq);
    neg[r] = _mm512_movepi8_mask(wq);
    dw[r] = SplitScale(BlockScale(block), pair ? BlockScale(block + kBlockBytes<kType>) : 0.0f);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* q = qx + t * cols + 32 * b;
    const __m512i xq =
        pair ? _mm512_loadu_si512(q)
             : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    const float* d = dx + t * (cols / 32) + b;
    const __m512 dxv = SplitScale(d[0], pair ? d[1] : 0.0f);
    for (int r = 0; r < R; ++r) {
      const __m512i sx = _mm512_mask_sub_epi8(xq, neg[r], zero, xq);
      const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(aw[r], sx), ones);
      acc[r][t][0] =
          _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dxv), _mm512_cvtepi32_ps(p), acc[r][t][0]);
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// AVX512-VNNI (Highway's AVX3_DL target string lacks it, so these functions add it; the
// runtime check for AVX3_DL requires VNNI). With u = q + 128 as u8, dpbusd gives the exact
// sum (q + 128) w per group without saturation; starting it from -128 * sum w leaves
// p[b][g] = sum q w, the same integers as the sign trick.
#define KVSERVE_MATMUL_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

#endif

#if HWY_TARGET == HWY_AVX3_DL
// The VNNI tiles proper. Activations come prepared by VnniPrepare: u = q + 128 as u8 and, per
// block pair, the scale vector [dx_b x 8, dx_b+1 x 8]; so the per-token work of a step is two
// loads. Per weight row and block pair: the 64 weights, their -128 * sum offsets and the
// scale vector [dw_b x 8, dw_b+1 x 8] (two broadcast f16 scales, one blend, one widening).
// Per (row, token): dpbusd, widen, dw * dx, fma: the scheme's own operations.
HWY_INLINE void VnniPrepare(int64_t cols, int8_t* q, const float* d, float* dxv) {
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    _mm512_storeu_si512(q + c, _mm512_xor_si512(_mm512_loadu_si512(q + c), k128));
  }
  for (; c < cols; ++c) q[c] = static_cast<int8_t>(static_cast<uint8_t>(q[c]) ^ 0x80u);
  const int64_t num_blocks = cols / 32;
  for (int64_t b = 0; b < num_blocks; b += 2) {
    _mm512_storeu_ps(dxv + 8 * b, SplitScale(d[b], b + 1 < num_blocks ? d[b + 1] : 0.0f));
  }
}

template <tensor::DType kType>
KVSERVE_MATMUL_VNNI HWY_INLINE __m512 VnniWeightScales(const uint8_t* block, bool pair) {
  int16_t h0, h1 = 0;
  std::memcpy(&h0, block, 2);
  if (pair) std::memcpy(&h1, block + kBlockBytes<kType>, 2);
  return _mm512_cvtph_ps(
      _mm256_mask_blend_epi16(0xFF00, _mm256_set1_epi16(h0), _mm256_set1_epi16(h1)));
}

// Adds block pair p (blocks 2p and 2p + 1; only 2p when !kPair) of an R x T tile.
template <tensor::DType kType, int R, int T, bool kPair>
KVSERVE_MATMUL_VNNI HWY_INLINE void VnniPairStep(const uint8_t* w, int64_t w_stride,
                                                 const uint8_t* xu, const float* dxv, int64_t cols,
                                                 int64_t pairs, int64_t p, VF (&acc)[R][T]) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t b = 2 * p;
  __m512i wq[R], offset[R];
  __m512 dw[R];
  for (int r = 0; r < R; ++r) {
    const uint8_t* block = w + r * w_stride + b * kBlockBytes<kType>;
    const __m256i lo = LoadBlock<kType>(block);
    const __m256i hi =
        kPair ? LoadBlock<kType>(block + kBlockBytes<kType>) : _mm256_setzero_si256();
    wq[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    offset[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wq[r]));
    dw[r] = VnniWeightScales<kType>(block, kPair);
  }
  for (int t = 0; t < T; ++t) {
    const uint8_t* u = xu + t * cols + 32 * b;
    const __m512i xv =
        kPair ? _mm512_loadu_si512(u)
              : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u)));
    const __m512 dx = _mm512_loadu_ps(dxv + (t * pairs + p) * 16);
    for (int r = 0; r < R; ++r) {
      const __m512i prod = _mm512_dpbusd_epi32(offset[r], xv, wq[r]);
      acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(prod), acc[r][t]);
    }
  }
}

// y[t, r] for an R x T tile: xu T prepared rows of `cols`, dxv their pair scales.
template <tensor::DType kType, int R, int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void VnniTile(const uint8_t* w, int64_t w_stride, int64_t cols,
                                               const uint8_t* xu, const float* dxv, float* y,
                                               int64_t y_stride) {
  VF acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Zero();
  const int64_t num_blocks = cols / 32;
  const int64_t pairs = (num_blocks + 1) / 2;
  for (int64_t p = 0; p < num_blocks / 2; ++p) {
    VnniPairStep<kType, R, T, true>(w, w_stride, xu, dxv, cols, pairs, p, acc);
  }
  if (num_blocks % 2) {
    VnniPairStep<kType, R, T, false>(w, w_stride, xu, dxv, cols, pairs, num_blocks / 2, acc);
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const VF one[1] = {acc[r][t]};
      y[t * y_stride + r] = ReduceVirtual(one);
    }
  }
}

template <tensor::DType kType, int R, int kMaxT, int T = kMaxT>
HWY_INLINE void VnniTileT(int t_count, const uint8_t* w, int64_t w_stride, int64_t cols,
                          const uint8_t* xu, const float* dxv, float* y, int64_t y_stride) {
  if constexpr (T >= 1) {
    if (t_count == T) return VnniTile<kType, R, T>(w, w_stride, cols, xu, dxv, y, y_stride);
    VnniTileT<kType, R, kMaxT, T - 1>(t_count, w, w_stride, cols, xu, dxv, y, y_stride);
  }
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) in R x T tiles (single rows at the end).
template <tensor::DType kType, int R, int T>
void VnniRowsRT(const WeightMatrix& w, const int8_t* qx, const float* dxv, float* y,
                int64_t row_begin, int64_t row_end, int64_t t_begin, int64_t t_end) {
  const int64_t w_stride = tensor::RowBytes(kType, w.cols);
  const int64_t pair_floats = (w.cols + 63) / 64 * 16;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* xu = reinterpret_cast<const uint8_t*>(qx);
  for (int64_t r = row_begin; r < row_end;) {
    const bool full_rows = r + R <= row_end;
    for (int64_t t = t_begin; t < t_end; t += T) {
      const int t_count = static_cast<int>(std::min<int64_t>(T, t_end - t));
      for (int64_t rr = r; rr < (full_rows ? r + 1 : row_end); ++rr) {
        const uint8_t* wr = base + rr * w_stride;
        float* yr = y + t * w.rows + rr;
        const uint8_t* u = xu + t * w.cols;
        const float* d = dxv + t * pair_floats;
        if (full_rows)
          VnniTileT<kType, R, T>(t_count, wr, w_stride, w.cols, u, d, yr, w.rows);
        else
          VnniTileT<kType, 1, T>(t_count, wr, w_stride, w.cols, u, d, yr, w.rows);
      }
    }
    r = full_rows ? r + R : row_end;
  }
}

// 4 x 4 tiles: four weight streams in flight for a lone decode (bound by weight bandwidth),
// and for a batch the fastest shape measured (2 x 8, 3 x 6, 2 x 10 and 3 x 5 were 10-30% slower
// at 16 tokens: docs/PERFORMANCE.md).
template <tensor::DType kType>
void VnniRows(const WeightMatrix& w, const int8_t* qx, const float* dxv, float* y,
              int64_t row_begin, int64_t row_end, int64_t t_begin, int64_t t_end) {
  VnniRowsRT<kType, 4, 4>(w, qx, dxv, y, row_begin, row_end, t_begin, t_end);
}

#undef KVSERVE_MATMUL_VNNI

#else  // AVX3 without VNNI: the sign trick.

template <tensor::DType kType, int R, int T>
HWY_NOINLINE void QuantTile(const uint8_t* w, int64_t w_stride, int64_t cols, const int8_t* qx,
                            const float* dx, float* y, int64_t y_stride) {
  VF acc[R][T][kVecs];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t][0] = Zero();
  const int64_t num_blocks = cols / 32;
  int64_t b = 0;
  for (; b + 1 < num_blocks; b += 2) {
    QuantPairStep<kType, R, T>(w, w_stride, qx, dx, cols, b, true, acc);
  }
  if (b < num_blocks) QuantPairStep<kType, R, T>(w, w_stride, qx, dx, cols, b, false, acc);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = ReduceVirtual(acc[r][t]);
}

#endif  // AVX3_DL
#endif  // AVX2 / AVX-512
