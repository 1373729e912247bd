// AMX int8 tiles for the K formats on batches (the 32-value formats: matmul_x86_amx32-inl.h).
// Textually included by matmul_x86_quant-inl.h for the AVX3_DL target only (the tiles are used
// only when MatMul found AMX usable at run time: QuantActivations::amx); see matmul.h for the
// scheme.
//
// The scheme's exact block integers, formed by tdpbusd / tdpbssd (u8 / int8 x int8 -> int32,
// exact): a tile C
// of 16 weight rows x 16 tokens accumulates A (16 rows x K weight values, int8) times B (the
// token group's codes, K / 4 rows of [16 tokens][4], exactly internal::TokenGroups' q layout).
//   K formats (K = 64, four steps per block of 256): the scaled value v = s_j q_i (|v| <= 4096)
//     does not fit int8, so it is split into its bytes, v = 256 h + l with l = v & 255 in
//     [0, 255] (unsigned: tdpbusd) and h = v >> 8 in [-16, 16] (tdpbssd): I_b = C_l + 256 C_h =
//     sum_j s_j sum_{i in j} q_i a_i.
//     M_b = sum_j m_j S_j by vpdpwssd over pairs of sub-blocks (int16 m_j and S_j).
// |C| stays below 2^31 (256 * 4096 * 128). The f32 chain of the scheme then runs per weight row
// with the 16 tokens in the lanes, block after block, as the token-group tiles do.
//
// Tiles (no register renaming for tiles, so every load of a step goes to its own tile): C of
// part p (l or h) and token group g in tmm(2 p + g), A of part p in tmm(4 + p), B of group g in
// tmm(6 + g).

#define KVSERVE_MATMUL_AMX \
  __attribute__((target(HWY_TARGET_STR ",avx512vnni,amx-tile,amx-int8")))

// Parts of A (l and h), and values per tile multiply (64 of a 256-value block).
inline constexpr int kAmxParts = 2;
inline constexpr int kAmxK = 64;

// Values per min of the K formats with a min term (Q2_K: 16; Q4_K, Q5_K: 32), and the pairs of
// mins per block that vpdpwssd takes.
template <tensor::DType kType>
inline constexpr int kAmxMinSub = kType == tensor::DType::kQ2_K ? 16 : 32;
template <tensor::DType kType>
inline constexpr int kAmxMinPairs = 256 / kAmxMinSub<kType> / 2;

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads cfg as the calling thread's tile configuration.
KVSERVE_MATMUL_AMX HWY_INLINE void AmxLoadConfig(const AmxTileConfig& cfg) {
  // GCC 12 does not see that ldtilecfg reads all of cfg and drops some of the stores that
  // filled it; the barrier makes them happen first.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// Configures the calling thread's tiles (layout in the file comment).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxConfigure() {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(t >= 6 ? kAmxK / 4 : 16);
    cfg.colsb[t] = static_cast<uint16_t>(kAmxK);
  }
  AmxLoadConfig(cfg);
}

// Clears C tiles 0-3, where the row loops accumulate (after AmxConfigure / AmxConfigure32).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxZeroCTiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// The A parts of one tile of 16 rows: parts [part][row][cols] int8, and for the formats with
// a min term the mins in vpdpwssd pairs, mins [row][cols / 256 * kAmxMinPairs] int32 (low half
// the first min). Per-thread buffers.
struct AmxParts {
  int8_t* parts;
  int32_t* mins;
};

HWY_INLINE AmxParts AmxPartsBuffer(int64_t cols) {
  thread_local std::vector<int32_t> buffer;
  const size_t words = static_cast<size_t>((2 * 16 * cols) / 4 + 16 * (cols / 32));
  if (buffer.size() < words) buffer.resize(words);
  return {reinterpret_cast<int8_t*>(buffer.data()), buffer.data() + (2 * 16 * cols) / 4};
}

// Fills the A parts of rows [0, num_rows) from the decoded rows (vals u8 = value + kOffset on
// AVX3_DL); the parts of rows past num_rows are zeroed.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxFillParts(const DecodedRows& dec, int num_rows,
                                                  int64_t cols, const AmxParts& out) {
  using Traits = QuantTraits<kType>;
  const int64_t part_stride = 16 * cols;
  for (int i = 0; i < num_rows; ++i) {
    const uint8_t* vals = dec.vals + i * cols;
    int8_t* row = out.parts + i * cols;
    const int16_t* sc = dec.sc16 + i * (cols / 16);
    const __m512i offset = _mm512_set1_epi16(Traits::kOffset);
    for (int64_t k = 0; k < cols / 16; k += 2) {
      const __m512i u = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vals + 16 * k)));
      const __m512i s = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[k])),
                                           _mm256_set1_epi16(sc[k + 1]), 1);
      const __m512i v = _mm512_mullo_epi16(_mm512_sub_epi16(u, offset), s);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 16 * k),
                          _mm512_cvtepi16_epi8(v));  // the low bytes
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + part_stride + 16 * k),
                          _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    }
    if constexpr (Traits::kHasMin) {
      constexpr int kStep = kAmxMinSub<kType> / 16;  // 16-value groups per min
      const int16_t* mn = dec.mn16 + i * (cols / 16);
      int32_t* pairs = out.mins + i * (cols / 256 * kAmxMinPairs<kType>);
      for (int64_t p = 0; p < cols / 256 * kAmxMinPairs<kType>; ++p) {
        const uint32_t lo = static_cast<uint16_t>(mn[2 * kStep * p]);
        const uint32_t hi = static_cast<uint16_t>(mn[2 * kStep * p + kStep]);
        pairs[p] = static_cast<int32_t>(lo | hi << 16);
      }
    }
  }
  for (int p = 0; p < kAmxParts; ++p) {
    std::memset(out.parts + p * part_stride + num_rows * cols, 0,
                static_cast<size_t>((16 - num_rows) * cols));
  }
}

// Q4_K / Q5_K: the 8 sub-block scales and 8 mins of the block whose 12-byte scale field is at p
// (ggml's packing: tensor/quant_ints.h).
// With the words u0, u1, u2 of the field: scales 0-3 = u0 & 0x3F.., scales 4-7 = (u2 & 0x0F..) |
// ((u0 >> 6) & 0x03..) << 4, mins 0-3 = u1 & 0x3F.., mins 4-7 = ((u2 >> 4) & 0x0F..) | ((u1 >> 6)
// & 0x03..) << 4, computed in one 128-bit register (4 bytes past the field are read, unused).
// Returns the 16 bytes scales 0-7, mins 0-7. (Also used by the gemv rows of Q4_K / Q5_K.)
HWY_INLINE __m128i Q4KScalesMins(const uint8_t* p) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_and_si128(  // [u0, u2, u1, u2 >> 4] & [low 6, low 4, low 6, low 4]
      _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)), _mm_set_epi32(4, 0, 0, 0)),
      _mm_set_epi32(0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F));
  const __m128i high = _mm_and_si128(  // bits 6-7 of u0's (u1's) bytes at bits 4-5, lanes 1 and 3
      _mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2),
      _mm_set_epi32(0x30303030, 0, 0x30303030, 0));
  return _mm_or_si128(low, high);
}

// Asks for `lines` cache lines from p of the next tile's same row (16 rows on), as the gemv
// rows' PrefetchAhead does, but into L2: the parts, the token codes and the accumulators
// hold much of L1 here (measured, 300000 x 1024 Q6_K and 400000 x 1024 Q4_K matrices at 16
// tokens, one thread: 47.5 and 54.9 ms against 49.4 and 57.1 into L1, 76 and 80 without).
template <int kLines>
HWY_INLINE void AmxPrefetchNextTile(const uint8_t* p, int64_t row_bytes) {
  for (int l = 0; l < kLines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + 16 * row_bytes + 64 * l), _MM_HINT_T1);
  }
}

// Where AmxFillPartsInPlace writes blocks [b_begin, b_end) of a tile: the parts of row i and
// block b at parts + i * stride + 256 (b - b_begin), part h at + 16 * stride (stride = cols for
// whole rows, 256 for one block); the min pairs at mins + i * (cols / 256 * 4) + 4 b and the
// factors at d[b * 16 + i], dmin[b * 16 + i] whatever the range.
struct AmxFillTarget {
  int64_t b_begin, b_end;
  int8_t* parts;
  int64_t stride;
  int32_t* mins;
  float* d;
  float* dmin;
};

// vpermb index of Q4_K's fill: int16 lane k of the scale register (both bytes: a maskz
// permutation with kAmxLowBytes zeroes the high one) = scale 2 c (k < 16) or 2 c + 1.
inline constexpr __mmask64 kAmxLowBytes = 0x5555555555555555ull;
alignas(64) inline constexpr auto kAmxQ4KScalePick = [] {
  std::array<std::array<uint8_t, 64>, 4> t{};
  for (int c = 0; c < 4; ++c) {
    for (int k = 0; k < 64; ++k) t[c][k] = static_cast<uint8_t>(k < 32 ? 2 * c : 2 * c + 1);
  }
  return t;
}();
// Q6_K's fill: the int16 scale of each value's sub-block (picked from the 16 widened scales) in
// register 2 h + half, and the shifts that bring each value's two high bits of qh to bits 0-1
// (int16 lanes 0-15: the even or odd bytes of qh's first 32 values; 16-31: the next 32).
alignas(64) inline constexpr auto kAmxQ6KScalePick = [] {
  std::array<std::array<uint16_t, 32>, 4> t{};
  for (int r = 0; r < 4; ++r) {
    for (int k = 0; k < 32; ++k) t[r][k] = static_cast<uint16_t>(4 * r + k / 8);
  }
  return t;
}();
alignas(64) inline constexpr auto kAmxQ6KHighShift = [] {
  std::array<std::array<uint16_t, 32>, 4> t{};
  for (int k = 0; k < 4; ++k) {  // k = 2 odd + half: 8 odd + 4 half, + 2 for lanes 16-31
    for (int j = 0; j < 32; ++j) t[k][j] = static_cast<uint16_t>(8 * (k / 2) + 4 * (k % 2) + (j < 16 ? 0 : 2));
  }
  return t;
}();
// vpermt2b index of the fills: column k's low byte, from `even` (k even: byte k) or `odd` (k
// odd: byte k - 1 of the second register, 64 + k - 1).
alignas(64) inline constexpr auto kAmxPartPick = [] {
  std::array<uint8_t, 64> t{};
  for (int k = 0; k < 64; ++k) t[k] = static_cast<uint8_t>(k % 2 == 0 ? k : 63 + k);
  return t;
}();

// AmxFillParts straight from the file's Q4_K or Q6_K blocks (no decoded copy), blocks [b_begin,
// b_end) of rows [0, num_rows) of the tile at row0 (row_bytes apart), their d (and dmin,
// signed) as DecodeRows<kType, 16> leaves them; the parts of rows past num_rows are zeroed.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxFillPartsInPlace(const uint8_t* row0, int64_t row_bytes,
                                                         int num_rows, int64_t cols,
                                                         const AmxFillTarget& out) {
  static_assert(kType == tensor::DType::kQ4_K || kType == tensor::DType::kQ6_K);
  const int64_t part_stride = 16 * out.stride;
  [[maybe_unused]] const int64_t blocks = cols / 256;
  const int64_t width = 256 * (out.b_end - out.b_begin);
  float* d = out.d;
  float* dmin = out.dmin;
  // Q4_K: the 16 words of qs[32 c ..] shifted by 0 and 4 (`even`: values 64 c + 2 k and 64 c +
  // 32 + 2 k, the low and high nibbles of byte 2 k) or by 8 and 12 (`odd`: byte 2 k + 1's),
  // times their sub-block's scale (2 c in int16 lanes 0-15, 2 c + 1 in 16-31); pick_l / pick_h
  // then interleave the two registers' low / high bytes back into column order.
  // Q6_K, half h of the block and values 128 h + 64 half ..: the 32 words of ql[64 h ..] shifted
  // by 4 k (k = 2 odd + half: `even` the low or high nibbles of the even bytes, `odd` of the
  // odd ones), their two high bits from the words of qh[32 h ..] (both register halves)
  // shifted by kAmxQ6KHighShift[k], minus 32, times their 16-value sub-block's scale.
  [[maybe_unused]] const __m512i shift_even = _mm512_inserti64x4(
      _mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  [[maybe_unused]] const __m512i shift_odd = _mm512_inserti64x4(
      _mm512_set1_epi16(8), _mm256_set1_epi16(12), 1);
  const __m512i nibble = _mm512_set1_epi16(0x0F);
  [[maybe_unused]] const __m512i three = _mm512_set1_epi16(3);
  [[maybe_unused]] const __m512i thirty_two = _mm512_set1_epi16(32);
  const __m512i pick_l = _mm512_load_si512(kAmxPartPick.data());
  const __m512i pick_h = _mm512_add_epi8(pick_l, _mm512_set1_epi8(1));
  for (int i = 0; i < num_rows; ++i) {
    for (int64_t b = out.b_begin; b < out.b_end; ++b) {
      int8_t* row = out.parts + i * out.stride + 256 * (b - out.b_begin);
      if constexpr (kType == tensor::DType::kQ4_K) {
        const uint8_t* p = row0 + i * row_bytes + 144 * b;  // d, dmin, scales[12], qs[128]
        AmxPrefetchNextTile<3>(p, row_bytes);
        d[b * 16 + i] = LoadHalf(p);
        dmin[b * 16 + i] = -LoadHalf(p + 2);
        const __m128i sm = Q4KScalesMins(p + 4);
        // Pair p of the mins: m_{2p} | m_{2p+1} << 16, i.e. the 8 mins widened to int16.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out.mins + i * (blocks * 4) + 4 * b),
                         _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
        const __m512i sm512 = _mm512_castsi128_si512(sm);
        for (int c = 0; c < 4; ++c) {  // values 64 c ..: the low nibbles of qs[32 c ..], then high
          const __m512i w = _mm512_broadcast_i64x4(Load256(p + 16 + 32 * c));
          const __m512i s = _mm512_maskz_permutexvar_epi8(
              kAmxLowBytes, _mm512_load_si512(kAmxQ4KScalePick[c].data()), sm512);
          const __m512i even = _mm512_mullo_epi16(
              _mm512_and_si512(_mm512_srlv_epi16(w, shift_even), nibble), s);
          const __m512i odd = _mm512_mullo_epi16(
              _mm512_and_si512(_mm512_srlv_epi16(w, shift_odd), nibble), s);
          _mm512_storeu_si512(row + 64 * c, _mm512_permutex2var_epi8(even, pick_l, odd));
          _mm512_storeu_si512(row + part_stride + 64 * c,
                              _mm512_permutex2var_epi8(even, pick_h, odd));
        }
      } else {
        const uint8_t* p = row0 + i * row_bytes + 210 * b;  // ql[128], qh[64], scales[16], d
        AmxPrefetchNextTile<4>(p, row_bytes);
        d[b * 16 + i] = LoadHalf(p + 208);
        const __m512i sc = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
        for (int h = 0; h < 2; ++h) {  // values 128 h ..
          const __m512i ql = _mm512_loadu_si512(p + 64 * h);
          const __m512i qh = _mm512_broadcast_i64x4(Load256(p + 128 + 32 * h));
          for (int half = 0; half < 2; ++half) {  // values 128 h + 64 half ..
            const __m512i s = _mm512_permutexvar_epi16(
                _mm512_load_si512(kAmxQ6KScalePick[2 * h + half].data()), sc);
            auto values = [&](int odd) HWY_ATTR {  // `even` (0) or `odd` (1) below
              const int k = 2 * odd + half;  // W shift 4 k
              const __m512i w = _mm512_srlv_epi16(ql, _mm512_set1_epi16(static_cast<int16_t>(4 * k)));
              const __m512i high = _mm512_slli_epi16(
                  _mm512_and_si512(_mm512_srlv_epi16(qh, _mm512_load_si512(kAmxQ6KHighShift[k].data())),
                                   three),
                  4);
              const __m512i q = _mm512_ternarylogic_epi32(w, high, nibble, 0xEC);  // w & 15 | high
              return _mm512_mullo_epi16(_mm512_sub_epi16(q, thirty_two), s);
            };
            const __m512i even = values(0), odd = values(1);
            _mm512_storeu_si512(row + 128 * h + 64 * half,
                                _mm512_permutex2var_epi8(even, pick_l, odd));
            _mm512_storeu_si512(row + part_stride + 128 * h + 64 * half,
                                _mm512_permutex2var_epi8(even, pick_h, odd));
          }
        }
      }
    }
  }
  for (int p = 0; p < kAmxParts; ++p) {
    for (int i = num_rows; i < 16; ++i) {
      std::memset(out.parts + p * part_stride + i * out.stride, 0, static_cast<size_t>(width));
    }
  }
}

// C[part][group] += A[part] (16 rows, K values from `a`) x B[group] (from b0, b1). Each load is
// issued after the tile multiplies that do not read its tile, so it overlaps them (tiles are
// not renamed: a load waits for the last multiply reading its register).
template <int P, int G>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStep(const int8_t* a, int64_t part_stride, int64_t cols,
                                           const uint8_t* b0, const uint8_t* b1) {
  _tile_loadd(4, a, cols);
  _tile_loadd(6, b0, 64);
  _tile_dpbusd(0, 4, 6);
  if constexpr (G == 2) {
    _tile_loadd(7, b1, 64);
    _tile_dpbusd(1, 4, 7);
  }
  if constexpr (P == 2) {
    _tile_loadd(5, a + part_stride, cols);
    _tile_dpbssd(2, 5, 6);
    if constexpr (G == 2) _tile_dpbssd(3, 5, 7);
  }
}

// Stores the C tiles of P parts x G groups to c[2 part + group][16][16] and zeroes them.
template <int P, int G>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxDrain(int32_t (*c)[256]) {
  _tile_stored(0, c[0], 64);
  _tile_zero(0);
  if constexpr (G == 2) {
    _tile_stored(1, c[1], 64);
    _tile_zero(1);
  }
  if constexpr (P == 2) {
    _tile_stored(2, c[2], 64);
    _tile_zero(2);
  }
  if constexpr (P == 2 && G == 2) {
    _tile_stored(3, c[3], 64);
    _tile_zero(3);
  }
}

// M_b of the 16 tokens of a group for one row: sum over the min pairs p of the row's pair times
// the tokens' code sums of the two sub-blocks (vpdpwssd; |S| <= 32 * 128 fits int16).
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_INLINE __m512i AmxMins(const int32_t* row_pairs,
                                              const __m512i (&sum_pairs)[kAmxMinPairs<kType>]) {
  __m512i m = _mm512_setzero_si512();
  for (int p = 0; p < kAmxMinPairs<kType>; ++p) {
    m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32(row_pairs[p]), sum_pairs[p]);
  }
  return m;
}

// The token code sums of block b of a group as vpdpwssd pairs: pair p = (S of min sub-block
// 2p) | (S of sub-block 2p + 1) << 16, 16 tokens.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxSumPairs(const int32_t* sums, int64_t b,
                                               __m512i (&out)[kAmxMinPairs<kType>]) {
  constexpr int kStep = kAmxMinSub<kType> / 16;
  auto sub_sum = [&](int j) {  // code sum of min sub-block j of block b
    const int32_t* s = sums + 16 * (16 * b + kStep * j);
    __m512i v = _mm512_loadu_si512(s);
    if constexpr (kStep == 2) v = _mm512_add_epi32(v, _mm512_loadu_si512(s + 16));
    return v;
  };
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  for (int p = 0; p < kAmxMinPairs<kType>; ++p) {
    out[p] = _mm512_or_si512(_mm512_and_si512(sub_sum(2 * p), low16),
                             _mm512_slli_epi32(sub_sum(2 * p + 1), 16));
  }
}

// acc[r] (the 16 tokens of a group in the lanes) += the f32 chain of block b for rows r < 16,
// from the drained integers cl and ch ([16 rows][16 tokens] of parts l and h); dx and sums
// the group's block scales and code sums (internal::TokenGroups), mins the tile's min pairs
// (AmxParts::mins), dec.d / dec.dmin the rows' factors at [b * 16 + r].
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinishBlockK(const int32_t* cl, const int32_t* ch,
                                                   const float* dx,
                                                   [[maybe_unused]] const int32_t* sums,
                                                   [[maybe_unused]] const int32_t* mins,
                                                   const DecodedRows& dec, int64_t cols,
                                                   int64_t b, float (*acc)[16]) {
  constexpr bool kKMin = QuantTraits<kType>::kHasMin;
  const __m512 xv = _mm512_loadu_ps(dx + 16 * b);
  [[maybe_unused]] __m512i sum_pairs[kAmxMinPairs<kType>];
  if constexpr (kKMin) AmxSumPairs<kType>(sums, b, sum_pairs);
  for (int r = 0; r < 16; ++r) {
    const __m512i ints = _mm512_add_epi32(_mm512_load_si512(cl + 16 * r),
                                          _mm512_slli_epi32(_mm512_load_si512(ch + 16 * r), 8));
    const __m512 sd = _mm512_mul_ps(_mm512_set1_ps(dec.d[b * 16 + r]), xv);
    __m512 a = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(ints), _mm512_load_ps(acc[r]));
    if constexpr (kKMin) {
      const __m512 sm = _mm512_mul_ps(_mm512_set1_ps(dec.dmin[b * 16 + r]), xv);
      const int32_t* row_pairs =
          mins + r * (cols / 256 * kAmxMinPairs<kType>) + b * kAmxMinPairs<kType>;
      a = _mm512_fmadd_ps(sm, _mm512_cvtepi32_ps(AmxMins<kType>(row_pairs, sum_pairs)), a);
    }
    _mm512_store_ps(acc[r], a);
  }
}

// y of tokens t0 + j < n (j < 16) for the tile's rows < num_rows from acc[row][token]: a
// token's rows are contiguous in y (a column of acc, gathered).
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStoreByToken(const float (*acc)[16], float* y,
                                                   int64_t y_stride, int64_t t0, int64_t n,
                                                   int num_rows) {
  const __m512i column = _mm512_mullo_epi32(_mm512_set1_epi32(16), _mm512_set_epi32(
      15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __mmask16 rows_mask = static_cast<__mmask16>((1u << num_rows) - 1);
  for (int j = 0; j < 16 && t0 + j < n; ++j) {
    const __m512 v = _mm512_i32gather_ps(column, &acc[0][j], 4);
    _mm512_mask_storeu_ps(y + (t0 + j) * y_stride, rows_mask, v);
  }
}

// y for the 16 rows of `parts` x G groups of 16 tokens from `group`, tokens < n, rows <
// num_rows: the block integers by tiles, then the f32 chain of the scheme.
template <tensor::DType kType, int G>
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxTile(const AmxParts& parts, const DecodedRows& dec,
                                             int64_t cols, const internal::TokenGroups& layout,
                                             const uint8_t* staging, int64_t group, int64_t n,
                                             float* y, int64_t y_stride, int num_rows) {
  using Traits = QuantTraits<kType>;
  static_assert(Traits::kK, "32-value formats run AmxTokenTile");
  constexpr int kParts = kAmxParts, kK = kAmxK;
  const int64_t blocks = cols / Traits::kBlock;
  const int64_t part_stride = 16 * cols;
  const uint8_t* q[2];
  const float* dx[2];
  const int32_t* sums[2];
  for (int g = 0; g < G; ++g) {
    q[g] = staging + layout.QOffset(group + g);
    dx[g] = reinterpret_cast<const float*>(staging + layout.DOffset(group + g));
    sums[g] = reinterpret_cast<const int32_t*>(staging + layout.SumsOffset(group + g));
  }
  if constexpr (G == 1) q[1] = q[0];
  alignas(64) int32_t c[4][256];
  alignas(64) float acc[G][16][16];
  std::memset(acc, 0, sizeof(acc));
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t first = Traits::kBlock * b; first < Traits::kBlock * (b + 1); first += kK) {
      AmxStep<kParts, G>(parts.parts + first, part_stride, cols, q[0] + 16 * first,
                         q[1] + 16 * first);
    }
    AmxDrain<kParts, G>(c);
    for (int g = 0; g < G; ++g) {
      AmxFinishBlockK<kType>(c[g], c[2 + g], dx[g], sums[g], parts.mins, dec, cols, b, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) AmxStoreByToken(acc[g], y, y_stride, 16 * (group + g), n, num_rows);
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) (t_begin a multiple of 16) of a K format
// by AMX tiles of 16 rows x 32 tokens; the calling thread's tile state is configured here and
// released at the end.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX void AmxRowsK(const WeightMatrix& w, const internal::QuantActivations& act,
                                 int64_t n, float* y, int64_t row_begin, int64_t row_end,
                                 int64_t t_begin, int64_t t_end) {
  const int64_t cols = w.cols;
  const int64_t row_bytes = tensor::RowBytes(kType, cols);
  const DecodedRows dec = DecodeBuffer(16, cols);
  const AmxParts parts = AmxPartsBuffer(cols);
  const internal::TokenGroups layout{cols, QuantTraits<kType>::kBlock, (n + 15) / 16};
  const auto* base = static_cast<const uint8_t*>(w.data);
  AmxConfigure();
  AmxZeroCTiles();
  const int64_t g_end = (t_end + 15) / 16;
  for (int64_t r = row_begin; r < row_end; r += 16) {
    const int num_rows = static_cast<int>(std::min<int64_t>(16, row_end - r));
    if constexpr (kType == tensor::DType::kQ4_K || kType == tensor::DType::kQ6_K) {
      AmxFillPartsInPlace<kType>(base + r * row_bytes, row_bytes, num_rows, cols,
                                 {0, cols / 256, parts.parts, cols, parts.mins, dec.d, dec.dmin});
    } else {
      DecodeRows<kType, 16>(base + r * row_bytes, row_bytes, num_rows, cols, dec);
      AmxFillParts<kType>(dec, num_rows, cols, parts);
    }
    for (int64_t g = t_begin / 16; g < g_end; g += 2) {
      if (g + 1 < g_end) {
        AmxTile<kType, 2>(parts, dec, cols, layout, act.staging, g, t_end, y + r, w.rows, num_rows);
      } else {
        AmxTile<kType, 1>(parts, dec, cols, layout, act.staging, g, t_end, y + r, w.rows, num_rows);
      }
    }
  }
  _tile_release();
}
