// x86 MatMul for the integer weight formats: per-format row decoders and the row-tile engine.
// Textually included by matmul_x86-inl.h inside namespace kvserve::kernels::HWY_NAMESPACE,
// once per x86 target (AVX2, AVX3, AVX3_DL); 256-bit AVX2 instructions only. See matmul.h for
// the numerical scheme these functions implement bit-exactly.
//
// A tile of R weight rows is first decoded, whole, into a per-thread buffer (DecodedRows):
// one byte per value plus per-16-value integer scales; then tiles of T tokens run over it.
// Per (row, token) and block the engine forms the exact integers of the scheme:
//   32-value formats: values as int8; I_b = sum of the 32 products by the sign trick
//     (maddubs(|w|, a * sign(w)): pair sums <= 2 * 128 * 127, no saturation; then madd by 1).
//   K formats: values as u = q + offset (0..63; offset 0, 4 or 32 by format) and
//     I_b = sum_k sc_k sum_{16 values} u a - offset sum_k sc_k S_k, where S_k are the
//     activation sums of matmul.h: maddubs(u, a) pair sums <= 2 * 63 * 127, madd by the scale
//     of each pair. IQ4_XS (values -127..113) uses the sign trick instead, offset 0.
//   M_b (formats with a min term) = sum_k m_k S_k by madd.
// Each accumulator holds 8 int32 lanes; a tile's V = R * T accumulators are reduced to V
// integers together by hadd trees (exact), then the f32 fma chain runs on 4 sources at a time.

// ---- format traits ----

// AVX3_DL (AVX512-VNNI) multiplies u8 x s8 groups of 4 into int32 (dpbusd) and keeps every
// decoded value unsigned; the other targets keep the full-range formats signed (sign trick).
#if HWY_TARGET == HWY_AVX3_DL
inline constexpr bool kVnni = true;
#define KVSERVE_MATMUL_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
inline constexpr bool kVnni = false;
#define KVSERVE_MATMUL_VNNI
#endif

template <tensor::DType kType>
struct QuantTraits {
  static constexpr bool kK = tensor::DType::kQ2_K == kType || tensor::DType::kQ3_K == kType ||
                             tensor::DType::kQ4_K == kType || tensor::DType::kQ5_K == kType ||
                             tensor::DType::kQ6_K == kType || tensor::DType::kIQ4_XS == kType;
  static constexpr int kBlock = kK ? 256 : 32;
  // Full-range values (all 32-value formats, IQ4_XS): int8, or u8 = value + 128 on VNNI.
  static constexpr bool kFullRange = !kK || kType == tensor::DType::kIQ4_XS;
  static constexpr bool kSigned = kFullRange && !kVnni;
  // Offset added to the decoded values, stored as u8 = q + offset.
  static constexpr int kOffset = kType == tensor::DType::kQ6_K   ? 32
                                 : kType == tensor::DType::kQ3_K ? 4
                                 : kFullRange && kVnni           ? 128
                                                                 : 0;
  static constexpr bool kHasMin = kType == tensor::DType::kQ4_1 ||
                                  kType == tensor::DType::kQ5_1 || kType == tensor::DType::kQ2_K ||
                                  kType == tensor::DType::kQ4_K || kType == tensor::DType::kQ5_K;
};

// Decoded rows of a tile of kQuantRowTile rows: for row i, vals[i * cols + c] is value c (u8 =
// q + kOffset, or int8 when kSigned); sc16 / corr16 / mn16 [i * cols / 16 + k] the scale,
// kOffset * scale and min of values 16 k .. 16 k + 15 (K formats); d / dmin [b * R + i] the
// block's f32 factors of the integer form (dmin already signed), rows contiguous per block.
// Owned by a per-thread buffer (DecodeBuffer).
struct DecodedRows {
  uint8_t* vals;
  int16_t* sc16;
  int16_t* corr16;
  int16_t* mn16;
  float* d;
  float* dmin;
};

// The calling thread's decode buffer for `rows` rows of `cols` values; grows, never shrinks.
HWY_INLINE DecodedRows DecodeBuffer(int64_t rows, int64_t cols) {
  thread_local std::vector<uint8_t> buffer;
  const int64_t vals = rows * cols;
  const int64_t sub = rows * (cols / 16);
  const int64_t blocks = rows * (cols / 32);
  const size_t bytes = static_cast<size_t>(vals + 3 * 2 * sub + 2 * 4 * blocks + 256);
  if (buffer.size() < bytes) buffer.resize(bytes);
  uint8_t* p = buffer.data();
  DecodedRows out;
  out.vals = p;
  p += vals;
  out.sc16 = reinterpret_cast<int16_t*>(p);
  out.corr16 = out.sc16 + sub;
  out.mn16 = out.corr16 + sub;
  out.d = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(out.mn16 + sub + 3) & ~uintptr_t{3});
  out.dmin = out.d + blocks;
  return out;
}

HWY_INLINE float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

HWY_INLINE __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

HWY_INLINE void Store256(uint8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

// 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high nibbles (nibble order).
HWY_INLINE __m256i NibblesInOrder(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte i = 0xFF when bit i of `bits` is set, for i < 32.
HWY_INLINE __m256i BitsToBytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// nibbles -> table[nibble] for a 16-entry int8 table (IQ4_NL's, MXFP4's).
HWY_INLINE __m256i TableLookup(const int8_t* table16, __m256i nibbles) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table16));
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), nibbles);
}

HWY_INLINE __m256i Iq4Lookup(__m256i nibbles) {
  return TableLookup(tensor::kIq4NlValues, nibbles);
}

// ---- 32-value formats: one block -> 32 int8 values, d, dmin ----

template <tensor::DType kType>
HWY_INLINE void DecodeBlock32(const uint8_t* b, uint8_t* vals, float* d, float* dmin) {
  using tensor::DType;
  if constexpr (kType == DType::kMXFP4) {  // E8M0 scale byte, no f16 field
    *d = tensor::Mxfp4Scale(b[0]);
    Store256(vals, TableLookup(tensor::kMxfp4Values, NibblesInOrder(b + 1)));
    return;
  }
  *d = LoadHalf(b);
  __m256i v;
  if constexpr (kType == DType::kQ8_0) {
    v = Load256(b + 2);
  } else if constexpr (kType == DType::kQ4_0) {
    v = _mm256_sub_epi8(NibblesInOrder(b + 2), _mm256_set1_epi8(8));
  } else if constexpr (kType == DType::kQ4_1) {
    *dmin = LoadHalf(b + 2);
    v = NibblesInOrder(b + 4);
  } else if constexpr (kType == DType::kIQ4_NL) {
    v = Iq4Lookup(NibblesInOrder(b + 2));
  } else {  // Q5_0 / Q5_1: the fifth bits of qh (bit i for value i)
    constexpr bool kQ51 = kType == DType::kQ5_1;
    uint32_t qh;
    std::memcpy(&qh, b + (kQ51 ? 4 : 2), 4);
    v = _mm256_or_si256(NibblesInOrder(b + (kQ51 ? 8 : 6)),
                        _mm256_and_si256(BitsToBytes(qh), _mm256_set1_epi8(0x10)));
    if constexpr (kQ51) {
      *dmin = LoadHalf(b + 2);
    } else {
      v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
    }
  }
  Store256(vals, v);
}

// ---- K formats: one super-block -> 256 values (u or s8), 16 scales, offsets, mins ----

// 6-bit scale and min of Q4_K / Q5_K sub-block j (ggml's get_scale_min_k4).
HWY_INLINE void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K / Q5_K (qh == nullptr for Q4_K).
HWY_INLINE void DecodeQ45K(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, uint8_t* vals,
                           int16_t* sc16, int16_t* mn16) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMinK4(j, b + 4, &sc, &m);
    sc16[2 * j] = sc16[2 * j + 1] = static_cast<int16_t>(sc);
    mn16[2 * j] = mn16[2 * j + 1] = static_cast<int16_t>(m);
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i hbits = qh != nullptr ? Load256(qh) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i v = Load256(qs + 32 * c);
    __m256i lo = _mm256_and_si256(v, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if (qh != nullptr) {
      const __m128i s_lo = _mm_cvtsi32_si128(2 * c), s_hi = _mm_cvtsi32_si128(2 * c + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, s_lo), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, s_hi), one), 4));
    }
    Store256(vals + 64 * c, lo);
    Store256(vals + 64 * c + 32, hi);
  }
}

HWY_INLINE void DecodeQ6K(const uint8_t* b, uint8_t* vals, int16_t* sc16) {
  for (int k = 0; k < 16; ++k) sc16[k] = static_cast<int8_t>(b[192 + k]);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = Load256(b + 64 * h), ql1 = Load256(b + 64 * h + 32);
    const __m256i qh = Load256(b + 128 + 32 * h);
    auto high = [&](int shift) {
      return _mm256_slli_epi16(
          _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), two), 4);
    };
    uint8_t* out = vals + 128 * h;
    Store256(out, _mm256_or_si256(_mm256_and_si256(ql0, low4), high(0)));
    Store256(out + 32, _mm256_or_si256(_mm256_and_si256(ql1, low4), high(2)));
    Store256(out + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), high(4)));
    Store256(out + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), high(6)));
  }
}

// Q2_K (with_high == false) or Q3_K: 2-bit fields of qs[64], plus Q3_K's hmask bit as +4.
HWY_INLINE void DecodeTwoBit(const uint8_t* qs, const uint8_t* hmask, uint8_t* vals) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i hm = hmask != nullptr ? Load256(hmask) : _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i q = Load256(qs + 32 * h);
    for (int s = 0; s < 4; ++s) {
      __m256i v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s)), three);
      if (hmask != nullptr) {
        const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + s)), one);
        v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 2));
      }
      Store256(vals + 128 * h + 32 * s, v);
    }
  }
}

HWY_INLINE void DecodeIq4Xs(const uint8_t* b, uint8_t* vals, int16_t* sc16) {
  const int scales_h = b[2] | b[3] << 8;
  for (int s = 0; s < 8; ++s) {
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((scales_h >> (2 * s)) & 3) << 4);
    sc16[2 * s] = sc16[2 * s + 1] = static_cast<int16_t>(ls - 32);
  }
  for (int s = 0; s < 8; ++s) Store256(vals + 32 * s, Iq4Lookup(NibblesInOrder(b + 8 + 16 * s)));
}

template <tensor::DType kType>
HWY_INLINE void DecodeBlockK(const uint8_t* b, uint8_t* vals, int16_t* sc16, int16_t* mn16,
                             float* d, float* dmin) {
  using tensor::DType;
  if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
    *d = LoadHalf(b);
    *dmin = -LoadHalf(b + 2);
    if constexpr (kType == DType::kQ4_K) {
      DecodeQ45K(b, nullptr, b + 16, vals, sc16, mn16);
    } else {
      DecodeQ45K(b, b + 16, b + 48, vals, sc16, mn16);
    }
  } else if constexpr (kType == DType::kQ6_K) {
    *d = LoadHalf(b + 208);
    DecodeQ6K(b, vals, sc16);
  } else if constexpr (kType == DType::kQ2_K) {
    *d = LoadHalf(b + 80);
    *dmin = -LoadHalf(b + 82);
    for (int k = 0; k < 16; ++k) {
      sc16[k] = static_cast<int16_t>(b[k] & 0xF);
      mn16[k] = static_cast<int16_t>(b[k] >> 4);
    }
    DecodeTwoBit(b + 16, nullptr, vals);
  } else if constexpr (kType == DType::kQ3_K) {
    *d = LoadHalf(b + 108);
    const uint8_t* sc = b + 96;
    for (int k = 0; k < 16; ++k) {
      const int low = k < 8 ? sc[k] & 0xF : sc[k - 8] >> 4;
      const int high = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
      sc16[k] = static_cast<int16_t>((low | high << 4) - 32);
    }
    DecodeTwoBit(b + 32, b, vals);
  } else {
    *d = LoadHalf(b);
    DecodeIq4Xs(b, vals, sc16);
  }
}

// Decodes rows [0, num_rows) of the tile starting at `row` (row_bytes apart) into out (d and
// dmin with stride R per block).
template <tensor::DType kType, int R>
HWY_NOINLINE void DecodeRows(const uint8_t* row, int64_t row_bytes, int num_rows, int64_t cols,
                             const DecodedRows& out) {
  using Traits = QuantTraits<kType>;
  const int64_t blocks = cols / Traits::kBlock;
  constexpr int64_t kBytes = kType == tensor::DType::kQ8_0  ? 34
                             : kType == tensor::DType::kQ4_1 ? 20
                             : kType == tensor::DType::kQ5_0 ? 22
                             : kType == tensor::DType::kQ5_1 ? 24
                             : kType == tensor::DType::kQ2_K ? 84
                             : kType == tensor::DType::kQ3_K ? 110
                             : kType == tensor::DType::kQ4_K ? 144
                             : kType == tensor::DType::kQ5_K ? 176
                             : kType == tensor::DType::kQ6_K ? 210
                             : kType == tensor::DType::kIQ4_XS ? 136
                             : kType == tensor::DType::kMXFP4  ? 17
                                                              : 18;  // Q4_0, IQ4_NL
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int i = 0; i < num_rows; ++i) {
    const uint8_t* src = row + i * row_bytes;
    uint8_t* vals = out.vals + i * cols;
    for (int64_t b = 0; b < blocks; ++b) {
      float* d = out.d + b * R + i;
      float* dmin = out.dmin + b * R + i;
      if constexpr (Traits::kK) {
        int16_t* sc16 = out.sc16 + i * (cols / 16) + 16 * b;
        int16_t* mn16 = out.mn16 + i * (cols / 16) + 16 * b;
        DecodeBlockK<kType>(src + b * kBytes, vals + 256 * b, sc16, mn16, d, dmin);
        if constexpr (Traits::kOffset != 0) {
          int16_t* corr16 = out.corr16 + i * (cols / 16) + 16 * b;
          for (int k = 0; k < 16; ++k) corr16[k] = static_cast<int16_t>(Traits::kOffset * sc16[k]);
        }
        if constexpr (Traits::kFullRange && kVnni) {  // IQ4_XS as u8 = value + 128
          for (int c = 0; c < 8; ++c) {
            Store256(vals + 256 * b + 32 * c, _mm256_xor_si256(Load256(vals + 256 * b + 32 * c), flip));
          }
        }
      } else {
        DecodeBlock32<kType>(src + b * kBytes, vals + 32 * b, d, dmin);
        if constexpr (kVnni) Store256(vals + 32 * b, _mm256_xor_si256(Load256(vals + 32 * b), flip));
      }
    }
  }
}

// ---- reductions ----

// The sums of the 8 int32 lanes of v0..v3: [sum v0, sum v1, sum v2, sum v3] (exact).
HWY_INLINE __m128i Sum4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// ---- the row-tile engine ----

// The per-pair scales of 32 values starting at value 32 c of a super-block: pair p (values
// 2p, 2p + 1) belongs to 16-value group 2c + p / 8.
HWY_INLINE __m256i PairScales(const int16_t* sc16, int c) {
  int32_t two;
  std::memcpy(&two, sc16 + 2 * c, 4);
  const __m256i pick = _mm256_set_epi64x(0x0302030203020302, 0x0302030203020302,
                                         0x0100010001000100, 0x0100010001000100);
  return _mm256_shuffle_epi8(_mm256_set1_epi32(two), pick);
}

// acc += the scaled products of 32 decoded values w with 32 activations a, as 8 int32 lanes
// (exact): s holds the per-pair scales (ones for the 32-value formats).
template <tensor::DType kType>
KVSERVE_MATMUL_VNNI HWY_INLINE __m256i ChunkProducts(__m256i acc, __m256i w, __m256i a,
                                                    __m256i s) {
  using Traits = QuantTraits<kType>;
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (Traits::kFullRange) {  // u8 = value + 128: groups of 4 into int32
    const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
    if constexpr (Traits::kK) return _mm256_add_epi32(acc, _mm256_mullo_epi32(dot, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s))));
    return _mm256_add_epi32(acc, dot);
  }
#endif
  __m256i p;
  if constexpr (Traits::kSigned) {
    p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
  } else {
    p = _mm256_maddubs_epi16(w, a);
  }
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
}

// The exact integers of block b for an R x T tile; source i = t * R + r (4 rows per group of
// four sources): ints[t] lane r = I_b (and mins[t] lane r = M_b) of row r and token t.
// q / sums: the activation rows of the tile's first token.
template <tensor::DType kType, int R, int T>
KVSERVE_MATMUL_VNNI HWY_INLINE void BlockInts(const DecodedRows& dec, int64_t cols, int64_t b,
                                              const int8_t* q, const int16_t* sums,
                                              __m128i (&ints)[T], __m128i (&mins)[T]) {
  static_assert(R == 4, "sources are grouped by 4 rows");
  using Traits = QuantTraits<kType>;
  constexpr int kBlock = Traits::kBlock;
  const int64_t sub_stride = cols / 16;
  __m256i acc[R * T];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int c = 0; c < kBlock / 32; ++c) {
    __m256i w[R], s[R];
    for (int r = 0; r < R; ++r) {
      w[r] = Load256(dec.vals + r * cols + kBlock * b + 32 * c);
      s[r] = Traits::kK ? PairScales(dec.sc16 + r * sub_stride + 16 * b, c) : ones;
    }
    for (int t = 0; t < T; ++t) {
      const __m256i a = Load256(reinterpret_cast<const uint8_t*>(q + t * cols + kBlock * b + 32 * c));
      for (int r = 0; r < R; ++r) acc[t * R + r] = ChunkProducts<kType>(acc[t * R + r], w[r], a, s[r]);
    }
  }
  auto sums16 = [&](int t) {
    return Load256(reinterpret_cast<const uint8_t*>(sums + t * sub_stride + 16 * b));
  };
  if constexpr (Traits::kK && Traits::kOffset != 0) {
    for (int r = 0; r < R; ++r) {
      const __m256i corr = Load256(reinterpret_cast<const uint8_t*>(dec.corr16 + r * sub_stride + 16 * b));
      for (int t = 0; t < T; ++t) {
        acc[t * R + r] = _mm256_sub_epi32(acc[t * R + r], _mm256_madd_epi16(corr, sums16(t)));
      }
    }
  }
  for (int t = 0; t < T; ++t) ints[t] = Sum4(acc[t * R], acc[t * R + 1], acc[t * R + 2], acc[t * R + 3]);
  // The 32-value formats' activation block sum S_b per token (M_b for Q4_1 / Q5_1, and the
  // offset correction of the VNNI form).
  [[maybe_unused]] int32_t block_sum[T];
  if constexpr (!Traits::kK) {
    for (int t = 0; t < T; ++t) block_sum[t] = sums[t * sub_stride + 2 * b] + sums[t * sub_stride + 2 * b + 1];
    if constexpr (Traits::kOffset != 0) {
      for (int t = 0; t < T; ++t) ints[t] = _mm_sub_epi32(ints[t], _mm_set1_epi32(Traits::kOffset * block_sum[t]));
    }
  }
  if constexpr (Traits::kHasMin && Traits::kK) {
    for (int r = 0; r < R; ++r) {
      const __m256i mn = Load256(reinterpret_cast<const uint8_t*>(dec.mn16 + r * sub_stride + 16 * b));
      for (int t = 0; t < T; ++t) acc[t * R + r] = _mm256_madd_epi16(mn, sums16(t));
    }
    for (int t = 0; t < T; ++t) mins[t] = Sum4(acc[t * R], acc[t * R + 1], acc[t * R + 2], acc[t * R + 3]);
  } else if constexpr (Traits::kHasMin) {
    for (int t = 0; t < T; ++t) mins[t] = _mm_set1_epi32(block_sum[t]);
  }
}

// y[t, r] for an R x T tile over all blocks: the f32 chain of matmul.h, four rows at a time.
template <tensor::DType kType, int R, int T>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void QuantTile(const DecodedRows& dec, int64_t cols,
                                                const int8_t* q, const float* dx,
                                                const int16_t* sums, float* y, int64_t y_stride,
                                                int num_rows) {
  using Traits = QuantTraits<kType>;
  const int64_t blocks = cols / Traits::kBlock;
  __m128 acc[T];
  for (auto& a : acc) a = _mm_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m128i ints[T], mins[T];
    BlockInts<kType, R, T>(dec, cols, b, q, sums, ints, mins);
    const __m128 dw = _mm_loadu_ps(dec.d + b * R);
    for (int t = 0; t < T; ++t) {
      const __m128 xv = _mm_set1_ps(dx[t * blocks + b]);
      acc[t] = _mm_fmadd_ps(_mm_mul_ps(dw, xv), _mm_cvtepi32_ps(ints[t]), acc[t]);
      if constexpr (Traits::kHasMin) {
        const __m128 dm = _mm_loadu_ps(dec.dmin + b * R);
        acc[t] = _mm_fmadd_ps(_mm_mul_ps(dm, xv), _mm_cvtepi32_ps(mins[t]), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < num_rows; ++r) y[t * y_stride + r] = out[r];
  }
}

template <tensor::DType kType, int R, int kMaxT, int T = kMaxT>
HWY_INLINE void QuantTileT(int t_count, const DecodedRows& dec, int64_t cols, const int8_t* q,
                           const float* dx, const int16_t* sums, float* y, int64_t y_stride,
                           int num_rows) {
  if constexpr (T >= 1) {
    if (t_count == T) return QuantTile<kType, R, T>(dec, cols, q, dx, sums, y, y_stride, num_rows);
    QuantTileT<kType, R, kMaxT, T - 1>(t_count, dec, cols, q, dx, sums, y, y_stride, num_rows);
  }
}

#if HWY_TARGET == HWY_AVX3_DL
#include "kernels/cpu/matmul_x86_vnni-inl.h"
#include "kernels/cpu/matmul_x86_amx-inl.h"
#include "kernels/cpu/matmul_x86_amx32-inl.h"
#include "kernels/cpu/matmul_x86_amx16k-inl.h"
#include "kernels/cpu/matmul_x86_amx16q6-inl.h"
#include "kernels/cpu/matmul_x86_amx16-inl.h"
#include "kernels/cpu/matmul_x86_gemv-inl.h"
#include "kernels/cpu/matmul_x86_gemv_mxfp4-inl.h"
#include "kernels/cpu/matmul_x86_lanes-inl.h"
#include "kernels/cpu/matmul_x86_q8rows-inl.h"
#endif

// Rows [row_begin, row_end) x tokens [t_begin, t_end) of n: decode kQuantRowTile rows at a
// time (a short last tile computes the missing rows from stale data and discards them), then
// the token-group tiles when the activations come interleaved (AVX3_DL batches), otherwise
// kQuantTokenTile tokens at a time. AVX3_DL batches on a CPU with AMX go to AmxRows instead,
// and up to GemvMaxTokens tokens (decode; a mixture of experts' experts) of the kHasGemv
// formats to GemvRows, which read the blocks in place; up to LanesMaxTokens (a batched decode
// step's dense matrices) of the kHasLanes formats to LanesRows, and up to kQ8RowsMaxTokens of
// Q8_0 to Q8Rows (the blocks read in place over the token groups).
template <tensor::DType kType>
void QuantRows(const WeightMatrix& w, const internal::QuantActivations& act, int64_t n, float* y,
               int64_t row_begin, int64_t row_end, int64_t t_begin, int64_t t_end) {
  constexpr int kR = kQuantRowTile, kT = kQuantTokenTile;
  constexpr int64_t kBlock = QuantTraits<kType>::kBlock;
#if HWY_TARGET == HWY_AVX3_DL
  if (act.amx) return AmxRows<kType>(w, act, n, y, row_begin, row_end, t_begin, t_end);
  if constexpr (kHasGemv<kType>) {
    // t_begin = 0, t_end = n here: ChunkTokens is at least 16.
    if (n <= GemvMaxTokens(kType)) {
      if constexpr (kType == tensor::DType::kMXFP4) {
        return GemvRowsMxfp4(w, act, y, row_begin, row_end, 0, n);
      } else {
        return GemvRows<kType>(w, act, n, y, row_begin, row_end);
      }
    }
  }
  if constexpr (kHasLanes<kType>) {
    if (n <= LanesMaxTokens(kType)) return LanesRows<kType>(w, act, y, row_begin, row_end, t_begin, t_end);
  }
  if constexpr (kType == tensor::DType::kQ8_0) {
    if (n <= kQ8RowsMaxTokens && act.staging != nullptr) {
      return Q8Rows(w, act, n, y, row_begin, row_end, t_begin, t_end);
    }
  }
#endif
  const int64_t cols = w.cols;
  const int64_t row_bytes = tensor::RowBytes(kType, cols);
  const DecodedRows dec = DecodeBuffer(kR, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kR) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kR, row_end - r));
    DecodeRows<kType, kR>(base + r * row_bytes, row_bytes, num_rows, cols, dec);
#if HWY_TARGET == HWY_AVX3_DL
    if (act.staging != nullptr) {
      const internal::TokenGroups layout{cols, kBlock, (n + 15) / 16};
      GroupRows<kType, kR>(dec, cols, act, layout, t_begin, t_end, y + r, w.rows, num_rows);
      continue;
    }
#else
    (void)n;
#endif
    for (int64_t t = t_begin; t < t_end; t += kT) {
      const int t_count = static_cast<int>(std::min<int64_t>(kT, t_end - t));
      QuantTileT<kType, kR, kT>(t_count, dec, cols, act.q + t * cols, act.d + t * (cols / kBlock),
                                act.sums + t * (cols / 16), y + t * w.rows + r, w.rows, num_rows);
    }
  }
}
