// x86 AVX2 / AVX-512 MatMul tiles. Textually included by matmul-inl.h inside
// namespace kvserve::kernels::HWY_NAMESPACE, once per x86 target; no include guard.
// See matmul.h for the numerical scheme these functions implement bit-exactly.

#if HWY_TARGET == HWY_AVX2
using VF = __m256;
inline constexpr int kLanes = 8;
inline constexpr int kRowTile = 2;
inline constexpr int kFloatTokenTile = 3;
inline constexpr int kQuantRowTile = 4;
inline constexpr int kQuantTokenTile = 2;
HWY_INLINE VF Zero() {
  return _mm256_setzero_ps();
}
HWY_INLINE VF Fma(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
HWY_INLINE VF LoadF32(const float* p) {
  return _mm256_loadu_ps(p);
}
HWY_INLINE VF LoadF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE VF LoadBF16(const uint8_t* p) {
  __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
#else
using VF = __m512;
inline constexpr int kLanes = 16;
inline constexpr int kRowTile = 4;
inline constexpr int kFloatTokenTile = 4;
inline constexpr int kQuantRowTile = 4;
inline constexpr int kQuantTokenTile = 4;
HWY_INLINE VF Zero() {
  return _mm512_setzero_ps();
}
HWY_INLINE VF Fma(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}
HWY_INLINE VF LoadF32(const float* p) {
  return _mm512_loadu_ps(p);
}
HWY_INLINE VF LoadF16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
HWY_INLINE VF LoadBF16(const uint8_t* p) {
  __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
#endif

// Registers per 16 virtual lanes: 1 on AVX-512, 2 on AVX2 (lanes 0-7, then 8-15).
inline constexpr int kVecs = internal::kVirtualLanes / kLanes;

// The fixed 16 -> 1 tree of matmul.h: s8[i] = l[i] + l[i+8], s4[i] = s8[i] + s8[i+4],
// s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
HWY_INLINE float ReduceVirtual(const VF (&acc)[kVecs]) {
#if HWY_TARGET == HWY_AVX2
  const __m256 s8 = _mm256_add_ps(acc[0], acc[1]);
#else
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(acc[0]), _mm512_extractf32x8_ps(acc[0], 1));
#endif
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

template <tensor::DType kType>
HWY_INLINE VF LoadWeights(const uint8_t* row, int64_t c) {
  if constexpr (kType == tensor::DType::kF32) {
    return LoadF32(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == tensor::DType::kF16) {
    return LoadF16(row + 2 * c);
  } else {
    return LoadBF16(row + 2 * c);
  }
}

// One 16-column step of an R x T float tile: w rows at `w`, x rows at `x`, column offset c.
template <tensor::DType kType, int R, int T>
HWY_INLINE void FloatStep(const uint8_t* w, int64_t w_stride, const float* x, int64_t x_stride,
                          int64_t c, VF (&acc)[R][T][kVecs]) {
  for (int v = 0; v < kVecs; ++v) {
    VF wv[R];
    for (int r = 0; r < R; ++r) wv[r] = LoadWeights<kType>(w + r * w_stride, c + v * kLanes);
    for (int t = 0; t < T; ++t) {
      const VF xv = LoadF32(x + t * x_stride + c + v * kLanes);
      for (int r = 0; r < R; ++r) acc[r][t][v] = Fma(wv[r], xv, acc[r][t][v]);
    }
  }
}

#if HWY_TARGET != HWY_AVX2
// ReduceVirtual's tree for up to 16 accumulators at once: stage k adds the same lane pairs
// (l[i] + l[i + 8], then + 4, + 2, + 1, lower lane first) for two accumulators per
// instruction, so the sums are the same bits. a[i], i < kCount, are the accumulators (the
// rest count as zero); lane 4 q + j of the result is the sum of a[4 j + q].
template <int kCount>
HWY_INLINE __m512 ReduceVirtual16(const __m512* a) {
  const __m512 zero = _mm512_setzero_ps();
  constexpr int n1 = (kCount + 1) / 2, n2 = (n1 + 1) / 2, n3 = (n2 + 1) / 2;
  __m512 b[8], c[4], d[2];
  for (int k = 0; k < n1; ++k) {  // halves of 8: [s8(a[2k]) | s8(a[2k + 1])]
    const __m512 x = a[2 * k], y = 2 * k + 1 < kCount ? a[2 * k + 1] : zero;
    b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  for (int k = 0; k < n2; ++k) {  // quarter q: s4(a[4k + q])
    const __m512 x = b[2 * k], y = 2 * k + 1 < n1 ? b[2 * k + 1] : zero;
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  }
  for (int k = 0; k < n3; ++k) {  // quarter q: s2(a[8k + q]), s2(a[8k + 4 + q])
    const __m512 x = c[2 * k], y = 2 * k + 1 < n2 ? c[2 * k + 1] : zero;
    d[k] = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
  }
  const __m512 x = d[0], y = n3 > 1 ? d[1] : zero;
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}

// y[t * y_stride + r] = ReduceVirtual(acc[r][t]) for a 4 x T tile: one tree for all of them
// and one 4-float store per token.
template <int T, int R>
HWY_INLINE void StoreReduced4(const VF (&acc)[R][T][kVecs], float* y, int64_t y_stride) {
  static_assert(R == 4 && kVecs == 1);
  __m512 a[4 * T];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < 4; ++r) a[4 * t + r] = acc[r][t][0];
  // Lane 4 r + t holds y[t, r]; gather each token's 4 rows into quarter t.
  const __m512i by_token =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 rows = _mm512_permutexvar_ps(by_token, ReduceVirtual16<4 * T>(a));
  alignas(64) float out[16];
  _mm512_store_ps(out, rows);
  for (int t = 0; t < T; ++t) std::memcpy(y + t * y_stride, out + 4 * t, 4 * sizeof(float));
}
#endif

// y[t, r] for an R x T tile. w: R rows of w_stride bytes; x: T rows of x_stride floats;
// y0: y[0, 0] of the tile, rows y_stride apart.
template <tensor::DType kType, int R, int T>
HWY_NOINLINE void FloatTile(const uint8_t* w, int64_t w_stride, int64_t cols, const float* x,
                            int64_t x_stride, float* y, int64_t y_stride) {
  VF acc[R][T][kVecs];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < kVecs; ++v) acc[r][t][v] = Zero();
  const int64_t full = cols - cols % internal::kVirtualLanes;
  for (int64_t c = 0; c < full; c += internal::kVirtualLanes) {
    FloatStep<kType, R, T>(w, w_stride, x, x_stride, c, acc);
  }
  if (full < cols) {
    // Tail: widen the last < 16 columns into zero-padded f32 buffers (zeros add nothing).
    alignas(64) float wbuf[R][internal::kVirtualLanes] = {};
    alignas(64) float xbuf[T][internal::kVirtualLanes] = {};
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_stride;
      for (int64_t c = full; c < cols; ++c) {
        uint16_t h;
        if constexpr (kType == tensor::DType::kF32) {
          std::memcpy(&wbuf[r][c - full], row + 4 * c, 4);
        } else if constexpr (kType == tensor::DType::kF16) {
          std::memcpy(&h, row + 2 * c, 2);
          wbuf[r][c - full] = internal::HalfToFloat(h);
        } else {
          std::memcpy(&h, row + 2 * c, 2);
          wbuf[r][c - full] = internal::BF16ToFloat(h);
        }
      }
    }
    for (int t = 0; t < T; ++t)
      std::memcpy(xbuf[t], x + t * x_stride + full, (cols - full) * sizeof(float));
    FloatStep<tensor::DType::kF32, R, T>(reinterpret_cast<const uint8_t*>(wbuf), sizeof(wbuf[0]),
                                         &xbuf[0][0], internal::kVirtualLanes, 0, acc);
  }
#if HWY_TARGET != HWY_AVX2
  if constexpr (R == 4) {
    StoreReduced4<T>(acc, y, y_stride);
    return;
  }
#endif
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = ReduceVirtual(acc[r][t]);
}

#include "kernels/cpu/matmul_x86_quant-inl.h"

#if HWY_TARGET != HWY_AVX2
// Blocks of 32 activations quantized as internal::QuantizeActivationRowPortable does, with the
// same operations in 16 lanes. NaN: max_ps returns its second operand when either is NaN, so
// max(|x|, acc) skips a NaN as std::max(acc, |x|) does; a NaN product is zeroed by the
// ordered mask before rounding. Truncation (roundscale toward zero), the exact |c - t| and
// the half-away step match the scalar t + away; both then convert exactly to int8.

// max(|x|, 0) over the 32 values of a block, in 16 lanes.
HWY_INLINE __m512 X86BlockAbsMax(const float* x) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512 m = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x), abs_mask), _mm512_setzero_ps());
  return _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + 16), abs_mask), m);
}

// The codes of a block from its 1 / scale (0 for an all-zero block).
HWY_INLINE void X86QuantizeCodes(const float* x, float inv, int8_t* q) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 lo = _mm512_set1_ps(-127.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 minus_one = _mm512_set1_ps(-1.0f);
  for (int h = 0; h < 2; ++h) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), vinv);
    const __mmask16 ordered = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    const __m512 c = _mm512_maskz_mov_ps(ordered, _mm512_min_ps(_mm512_max_ps(v, lo), hi));
    const __m512 t = _mm512_roundscale_ps(c, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_and_ps(_mm512_sub_ps(c, t), abs_mask);
    const __mmask16 away = _mm512_cmp_ps_mask(frac, half, _CMP_GE_OQ);
    const __mmask16 negative = _mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 step = _mm512_mask_mov_ps(one, negative, minus_one);
    const __m512 r = _mm512_mask_add_ps(t, away, t, step);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h),
                     _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
  }
}

HWY_INLINE void X86QuantizeBlock(const float* x, int8_t* q, float* d) {
  const float amax = _mm512_reduce_max_ps(X86BlockAbsMax(x));
  const float scale = amax / 127.0f;
  *d = scale;
  X86QuantizeCodes(x, scale != 0.0f ? 1.0f / scale : 0.0f, q);
}

// Pairs the lanes of a and b (16 blocks' partial maxima) by `kLanes`-float halves: the max of
// the two halves of each, a's in the low and b's in the high positions of each 2 * kLanes run.
template <int kLanes>
HWY_INLINE __m512 X86FoldPair(__m512 a, __m512 b) {
  if constexpr (kLanes == 8) {
    return _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  } else if constexpr (kLanes == 4) {
    return _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  } else if constexpr (kLanes == 2) {
    return _mm512_max_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
  } else {
    return _mm512_max_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
  }
}

// 16 consecutive blocks: the maxima of all 16 in one vector (lane i: block i; max is exact and
// the lanes hold no NaN, so the order of the folds does not matter), one vector division for
// the scales and one for their inverses, then the codes block by block.
HWY_INLINE void X86Quantize16Blocks(const float* x, int8_t* q, float* d) {
  __m512 m[16];
  for (int i = 0; i < 16; ++i) m[i] = X86BlockAbsMax(x + 32 * i);
  for (int i = 0; i < 8; ++i) m[i] = X86FoldPair<8>(m[2 * i], m[2 * i + 1]);
  for (int i = 0; i < 4; ++i) m[i] = X86FoldPair<4>(m[2 * i], m[2 * i + 1]);
  for (int i = 0; i < 2; ++i) m[i] = X86FoldPair<2>(m[2 * i], m[2 * i + 1]);
  // Lane 4 k + j now holds block k + 4 j.
  const __m512 folded = X86FoldPair<1>(m[0], m[1]);
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512 amax = _mm512_permutexvar_ps(order, folded);
  const __m512 scale = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  HWY_ALIGN float inv[16];
  _mm512_store_ps(inv, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), scale));
  _mm512_storeu_ps(d, scale);
  for (int i = 0; i < 16; ++i) X86QuantizeCodes(x + 32 * i, inv[i], q + 32 * i);
}

// One block of 256 activations quantized to Q8_K as QuantizeActivationRowQ8K (matmul.h) does:
// max = the first value of largest magnitude (max_ps(|x|, acc) skips NaN as the scalar `>`
// does), iscale = -127 / max, codes = clamp(round-half-even(iscale x)) with NaN -> 0 (|iscale x|
// <= 127, where roundscale equals ggml's 1.5 * 2^23 trick; an infinite iscale x gives -127 as
// that trick does), d = 1 / iscale, and the code sums of each 16. A block of finite values
// with a finite iscale (fma(x, 0, acc) stays 0 unless some x is NaN or infinite) has no NaN
// or infinite iscale x (|iscale x| <= 127), and skips those two masks.
HWY_INLINE void X86QuantizeBlockQ8K(const float* x, int8_t* q, float* d, int16_t* sums) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512 m = _mm512_setzero_ps(), special = _mm512_setzero_ps();
  for (int i = 0; i < 256; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    m = _mm512_max_ps(_mm512_and_ps(v, abs_mask), m);
    special = _mm512_fmadd_ps(v, _mm512_setzero_ps(), special);
  }
  const float amax = _mm512_reduce_max_ps(m);
  if (amax == 0.0f) {
    *d = 0.0f;
    std::memset(q, 0, 256);
    std::memset(sums, 0, 16 * sizeof(int16_t));
    return;
  }
  float max = 0.0f;
  const __m512 vamax = _mm512_set1_ps(amax);
  for (int i = 0; i < 256; i += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask), vamax, _CMP_EQ_OQ);
    if (hit != 0) {
      max = x[i + __builtin_ctz(hit)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const bool plain =
      _mm512_cmp_ps_mask(special, special, _CMP_ORD_Q) == 0xFFFF && std::isfinite(iscale);
  const __m512 vscale = _mm512_set1_ps(iscale);
  const __m512 lo = _mm512_set1_ps(-127.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  // 64 codes at a time into one register; the code sums of each 16 from it: vpsadbw sums
  // (code + 128) over each 8 bytes, two neighbours minus 2 * 8 * 128 give a sum of 16 (exact
  // integers, as adding them one by one).
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int i = 0; i < 256; i += 64) {
    __m128i codes[4];
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_mul_ps(vscale, _mm512_loadu_ps(x + i + 16 * k));
      const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m512 c = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
      if (!plain) {
        c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), c);
        // iscale overflows to -inf when max is subnormal: ggml's trick maps +-inf to -127.
        const __mmask16 inf =
            _mm512_cmp_ps_mask(_mm512_and_ps(v, abs_mask), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
        c = _mm512_mask_mov_ps(c, inf, lo);
      }
      codes[k] = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(c));
    }
    const __m512i bytes = _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(codes[0]), codes[1], 1),
                           codes[2], 2),
        codes[3], 3);
    _mm512_storeu_si512(q + i, bytes);
    const __m512i sad = _mm512_sad_epu8(_mm512_xor_si512(bytes, flip), _mm512_setzero_si512());
    // qword 2m + 1 onto qword 2m (within 128-bit lanes): qword 2m = sum of 16 number m + 2048
    const __m512i pairs = _mm512_add_epi64(sad, _mm512_shuffle_epi32(sad, _MM_PERM_BADC));
    const __m512i sum16 = _mm512_sub_epi64(pairs, _mm512_set1_epi64(2048));
    // qwords 0, 2, 4, 6 -> int16 lanes 0-3
    const __m512i even = _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), sum16);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(sums + i / 16), _mm512_cvtepi64_epi16(even));
  }
  *d = 1.0f / iscale;
}
#endif

// Calls Tile<kType, R, t_count> for t_count in 1..kMaxT.
template <tensor::DType kType, int R, int kMaxT, int T = kMaxT>
HWY_INLINE void FloatTileT(int t_count, const uint8_t* w, int64_t w_stride, int64_t cols,
                           const float* x, float* y, int64_t y_stride) {
  if constexpr (T >= 1) {
    if (t_count == T) return FloatTile<kType, R, T>(w, w_stride, cols, x, cols, y, y_stride);
    FloatTileT<kType, R, kMaxT, T - 1>(t_count, w, w_stride, cols, x, y, y_stride);
  }
}

// How far ahead of its row tile FloatRows requests weight rows: two row tiles of 256-byte rows,
// half a tile of 1 KiB rows. Measured on deepseek2's 16-token per-head products streamed from
// memory (BM_ExpertStream/0/256/64/16, /0/64/256/16): 1-2 KiB cut their time by a quarter,
// 8 KiB by a tenth.
inline constexpr int64_t kFloatPrefetchBytes = 2048;

// Rows [row_begin, row_end) x tokens [t_begin, t_end) in R x T tiles (single rows at the end).
template <tensor::DType kType>
void FloatRows(const WeightMatrix& w, const float* x, float* y, int64_t row_begin,
               int64_t row_end, int64_t t_begin, int64_t t_end) {
  constexpr int kT = kFloatTokenTile;
  constexpr int kR = kRowTile;
  const int64_t w_stride = tensor::RowBytes(kType, w.cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  // With several token tiles per row tile the rows are computed on long enough for their
  // misses to stall: the rows kFloatPrefetchBytes ahead are requested a row tile at a time.
  const bool prefetch = t_end - t_begin > kT;
  const uint8_t* w_end = base + row_end * w_stride;
  for (int64_t r = row_begin; r < row_end;) {
    const bool full_rows = r + kR <= row_end;
    if (prefetch) {
      const uint8_t* p = base + r * w_stride + kFloatPrefetchBytes;
      const uint8_t* p_end = std::min(w_end, p + kR * w_stride);
      for (; p < p_end; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    }
    for (int64_t t = t_begin; t < t_end; t += kT) {
      const int t_count = static_cast<int>(std::min<int64_t>(kT, t_end - t));
      for (int64_t rr = r; rr < (full_rows ? r + 1 : row_end); ++rr) {
        const uint8_t* wr = base + rr * w_stride;
        float* yr = y + t * w.rows + rr;
        const float* xt = x + t * w.cols;
        if (full_rows)
          FloatTileT<kType, kR, kT>(t_count, wr, w_stride, w.cols, xt, yr, w.rows);
        else
          FloatTileT<kType, 1, kT>(t_count, wr, w_stride, w.cols, xt, yr, w.rows);
      }
    }
    r = full_rows ? r + kR : row_end;
  }
}

// Token chunk whose activations stay in L2 (~256 KiB) while a thread sweeps its rows; a
// multiple of 16 (the token groups of the VNNI tiles).
HWY_INLINE int64_t ChunkTokens(const WeightMatrix& w) {
  const int64_t bytes_per_token = w.cols * (tensor::IsIntegerQuant(w.dtype) ? 1 : 4);
  const int64_t tokens = (int64_t{256} << 10) / std::max<int64_t>(1, bytes_per_token);
  return std::max<int64_t>(16, tokens / 16 * 16);
}

void X86Rows(const WeightMatrix& w, const float* x, const internal::QuantActivations& act,
             int64_t n, float* y, int64_t row_begin, int64_t row_end) {
  using tensor::DType;
  // AMX tiles decode and split each 16-row tile once per chunk, which costs more than the
  // activations' L2 residency saves: one chunk of all tokens.
  const int64_t chunk = act.amx ? n : ChunkTokens(w);
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t t1 = std::min(n, t0 + chunk);
    switch (w.dtype) {
#define KVSERVE_FLOAT_CASE(T) \
  case T: FloatRows<T>(w, x, y, row_begin, row_end, t0, t1); break;
#define KVSERVE_QUANT_CASE(T) \
  case T: QuantRows<T>(w, act, n, y, row_begin, row_end, t0, t1); break;
      KVSERVE_FLOAT_CASE(DType::kF32)
      KVSERVE_FLOAT_CASE(DType::kF16)
      KVSERVE_FLOAT_CASE(DType::kBF16)
      KVSERVE_QUANT_CASE(DType::kQ8_0)
      KVSERVE_QUANT_CASE(DType::kQ4_0)
      KVSERVE_QUANT_CASE(DType::kQ4_1)
      KVSERVE_QUANT_CASE(DType::kQ5_0)
      KVSERVE_QUANT_CASE(DType::kQ5_1)
      KVSERVE_QUANT_CASE(DType::kIQ4_NL)
      KVSERVE_QUANT_CASE(DType::kQ2_K)
      KVSERVE_QUANT_CASE(DType::kQ3_K)
      KVSERVE_QUANT_CASE(DType::kQ4_K)
      KVSERVE_QUANT_CASE(DType::kQ5_K)
      KVSERVE_QUANT_CASE(DType::kQ6_K)
      KVSERVE_QUANT_CASE(DType::kIQ4_XS)
      KVSERVE_QUANT_CASE(DType::kMXFP4)
#undef KVSERVE_FLOAT_CASE
#undef KVSERVE_QUANT_CASE
      default: internal::PortableRows(w, x, act, n, y, row_begin, row_end); return;
    }
  }
}
