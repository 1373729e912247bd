// AMX int8 tiles for the 32-value formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) on
// batches, and AmxRows, the AMX entry point of every integer format. Textually included by
// matmul_x86_quant-inl.h after matmul_x86_amx-inl.h (its KVSERVE_MATMUL_AMX, AmxTileConfig and
// the K formats' AmxRowsK), AVX3_DL target only; see matmul.h for the scheme.
//
// Tokens are the A operand: a tile C of 16 tokens x 16 weight rows is A (16 tokens x 32 codes of
// one block, read in place from the quantized activation rows, `cols` bytes apart) times B (the
// block's 32 values of the 16 rows as int8, 8 rows of [16 weight rows][4], packed once per row
// tile). tdpbssd forms I_b exactly; M_b (Q4_1 / Q5_1) is S_b, the token's code sum of the block.
// Row j of C holds token j's 16 output rows, so the f32 chain of the scheme runs with the 16
// weight rows in the lanes, one register per token (kept in registers across all blocks), and a
// token's results go to y as one contiguous store: no token-interleaved staging, no gather.
//
// Tiles: C of block b in tmm(b & 1), A in tmm(2 + (b & 1)), B in tmm(4 + (b & 1)), so the tile
// unit multiplies one block while the previous one is stored (tiles are not renamed: a load
// waits for the last multiply reading its register).

// The B operands and factors of a 16-row tile: b_ops [blocks][8][16][4] int8 (B row k of block
// b = values 4 k .. 4 k + 3 of each of the 16 rows), d / dmin [blocks][16] f32 (dmin only for
// Q4_1 / Q5_1). Per-thread buffer (d / dmin may point into the decode buffer instead).
struct AmxPacked32 {
  int8_t* b_ops;
  const float* d;
  const float* dmin;
};

// Activation rows of the last, partial token group, zero-padded to 16 tokens, laid out as the
// quantized rows are: q [16][cols] int8, dx [16][cols / 32] f32, sums [16][cols / 16] int16.
struct AmxTail32 {
  const int8_t* q;
  const float* dx;
  const int16_t* sums;
};

KVSERVE_MATMUL_AMX HWY_INLINE void AmxConfigure32() {
  AmxTileConfig cfg;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = cfg.rows[3] = 16;  // C, A: 16 tokens
  cfg.rows[4] = cfg.rows[5] = 8;                                // B: 32 values / 4
  cfg.colsb[0] = cfg.colsb[1] = cfg.colsb[4] = cfg.colsb[5] = 64;
  cfg.colsb[2] = cfg.colsb[3] = 32;
  // GCC 12 does not see that ldtilecfg reads all of cfg and drops some of the stores above.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// Packs the raw Q8_0 blocks of rows [0, num_rows) of a tile (`row_bytes` apart): values by
// dword gathers, d widened from the blocks' f16; rows past num_rows read as zero.
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxPackQ8_0(const uint8_t* rows, int64_t row_bytes,
                                                 int num_rows, int64_t blocks, int8_t* b_ops,
                                                 float* d) {
  const __m512i index = _mm512_mullo_epi32(
      _mm512_set1_epi32(static_cast<int32_t>(row_bytes)),
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __mmask16 live = static_cast<__mmask16>((1u << num_rows) - 1);
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = rows + 34 * b;  // f16 d, then 32 int8 values
    const __m512i head = _mm512_mask_i32gather_epi32(zero, live, index, block, 1);
    _mm512_storeu_ps(d + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head)));
    for (int k = 0; k < 8; ++k) {
      _mm512_storeu_si512(b_ops + 512 * b + 64 * k,
                         _mm512_mask_i32gather_epi32(zero, live, index, block + 2 + 4 * k, 1));
    }
  }
}

// Packs 16 decoded rows (vals u8 = value + 128 on AVX3_DL) as B operands.
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxPackDecoded(const DecodedRows& dec, int64_t cols,
                                                    int8_t* b_ops) {
  const __m512i index = _mm512_mullo_epi32(
      _mm512_set1_epi32(static_cast<int32_t>(cols)),
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < cols / 32; ++b) {
    for (int k = 0; k < 8; ++k) {
      const __m512i v = _mm512_i32gather_epi32(index, dec.vals + 32 * b + 4 * k, 1);
      _mm512_storeu_si512(b_ops + 512 * b + 64 * k, _mm512_xor_si512(v, flip));
    }
  }
}

// Loads block b's A (16 token rows of 32 codes) and B into set kSet and multiplies into its C.
// (The tile intrinsics take literal register numbers.)
template <int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxIssue32(const int8_t* a, int64_t cols, const int8_t* b) {
  if constexpr (kSet == 0) {
    _tile_loadd(2, a, cols);
    _tile_loadd(4, b, 64);
    _tile_dpbssd(0, 2, 4);
  } else {
    _tile_loadd(3, a, cols);
    _tile_loadd(5, b, 64);
    _tile_dpbssd(1, 3, 5);
  }
}

// Stores C of set kSet to c[16][16] and zeroes it.
template <int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxDrain32(int32_t* c) {
  if constexpr (kSet == 0) {
    _tile_stored(0, c, 64);
    _tile_zero(0);
  } else {
    _tile_stored(1, c, 64);
    _tile_zero(1);
  }
}

// The f32 chain of block b for 16 tokens: acc[j] lanes = token j's 16 rows.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinish32(const AmxPacked32& w, const int32_t* c,
                                               const float* dx, const int16_t* sums,
                                               int64_t cols, int64_t b, __m512 (&acc)[16]) {
  const int64_t blocks = cols / 32;
  const __m512 dv = _mm512_loadu_ps(w.d + 16 * b);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const __m512 xv = _mm512_set1_ps(dx[j * blocks + b]);
    const __m512 ints = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * j));
    acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dv, xv), ints, acc[j]);
    if constexpr (QuantTraits<kType>::kHasMin) {
      const int16_t* s = sums + j * (cols / 16) + 2 * b;
      const __m512 dm = _mm512_loadu_ps(w.dmin + 16 * b);
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dm, xv),
                               _mm512_set1_ps(static_cast<float>(s[0] + s[1])), acc[j]);
    }
  }
}

// y rows [0, num_rows) of a tile for tokens [0, num_tokens) of a group of 16: q, dx, sums the
// group's first activation row (strides cols, cols / 32, cols / 16), y the tile's y[0, 0].
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxTokenTile(const AmxPacked32& w, int64_t cols,
                                                  const int8_t* q, const float* dx,
                                                  const int16_t* sums, float* y, int64_t y_stride,
                                                  int num_rows, int num_tokens) {
  const int64_t blocks = cols / 32;
  alignas(64) int32_t c[4][256];
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  // Block b + 1 is multiplied while block b is stored and the f32 chain of block b - 2 runs: a
  // vector load of a tile store's bytes waits for the store, so the chain reads C two blocks
  // after storing it (c holds four blocks).
  auto issue = [&](auto set, int64_t b) HWY_ATTR {
    AmxIssue32<decltype(set)::value>(q + 32 * b, cols, w.b_ops + 512 * b);
  };
  using Set0 = std::integral_constant<int, 0>;
  using Set1 = std::integral_constant<int, 1>;
  issue(Set0{}, 0);
  for (int64_t b = 0; b < blocks; b += 2) {
    if (b + 1 < blocks) issue(Set1{}, b + 1);
    AmxDrain32<0>(c[b & 3]);
    if (b >= 2) AmxFinish32<kType>(w, c[(b - 2) & 3], dx, sums, cols, b - 2, acc);
    if (b + 1 < blocks) {
      if (b + 2 < blocks) issue(Set0{}, b + 2);
      AmxDrain32<1>(c[(b + 1) & 3]);
      if (b >= 2) AmxFinish32<kType>(w, c[(b - 1) & 3], dx, sums, cols, b - 1, acc);
    }
  }
  for (int64_t b = std::max<int64_t>(0, blocks - 2); b < blocks; ++b) {
    AmxFinish32<kType>(w, c[b & 3], dx, sums, cols, b, acc);
  }
  const __mmask16 rows_mask = static_cast<__mmask16>((1u << num_rows) - 1);
  for (int j = 0; j < num_tokens; ++j) _mm512_mask_storeu_ps(y + j * y_stride, rows_mask, acc[j]);
}

HWY_INLINE uint8_t* AlignUp64(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// The calling thread's buffer of packed operands for `cols` values (AmxPacked32's b_ops, then
// d and dmin).
HWY_INLINE int8_t* AmxPacked32Buffer(int64_t cols) {
  thread_local std::vector<uint8_t> buffer;
  const size_t bytes = static_cast<size_t>((cols / 32) * (512 + 64) + 64);
  if (buffer.size() < bytes) buffer.resize(bytes);
  return reinterpret_cast<int8_t*>(AlignUp64(buffer.data()));
}

// Copies activation rows [t_begin, t_end) (fewer than 16) into the calling thread's padded
// tail buffer.
HWY_INLINE AmxTail32 AmxFillTail32(const internal::QuantActivations& act, int64_t cols,
                                   int64_t t_begin, int64_t t_end) {
  thread_local std::vector<uint8_t> buffer;
  const int64_t blocks = cols / 32, q_bytes = 16 * cols, dx_bytes = 16 * blocks * 4;
  const size_t bytes = static_cast<size_t>(q_bytes + dx_bytes + 16 * (cols / 16) * 2);
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  uint8_t* base = AlignUp64(buffer.data());
  std::memset(base, 0, bytes);
  const int64_t count = t_end - t_begin;
  std::memcpy(base, act.q + t_begin * cols, static_cast<size_t>(count * cols));
  std::memcpy(base + q_bytes, act.d + t_begin * blocks, static_cast<size_t>(count * blocks * 4));
  std::memcpy(base + q_bytes + dx_bytes, act.sums + t_begin * (cols / 16),
              static_cast<size_t>(count * (cols / 16) * 2));
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + q_bytes),
          reinterpret_cast<const int16_t*>(base + q_bytes + dx_bytes)};
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) of a 32-value format by AmxTokenTile; the
// calling thread's tile state is configured here and released at the end.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX void AmxRows32(const WeightMatrix& w, const internal::QuantActivations& act,
                                  float* y, int64_t row_begin, int64_t row_end, int64_t t_begin,
                                  int64_t t_end) {
  const int64_t cols = w.cols, blocks = cols / 32;
  const int64_t row_bytes = tensor::RowBytes(kType, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  int8_t* b_ops = AmxPacked32Buffer(cols);
  float* own_d = reinterpret_cast<float*>(b_ops + 512 * blocks);
  [[maybe_unused]] DecodedRows dec{};
  if constexpr (kType != tensor::DType::kQ8_0) dec = DecodeBuffer(16, cols);
  const int64_t full_end = t_begin + (t_end - t_begin) / 16 * 16;
  const AmxTail32 tail =
      full_end < t_end ? AmxFillTail32(act, cols, full_end, t_end) : AmxTail32{};
  AmxConfigure32();
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t r = row_begin; r < row_end; r += 16) {
    const int num_rows = static_cast<int>(std::min<int64_t>(16, row_end - r));
    AmxPacked32 packed{b_ops, own_d, nullptr};
    if constexpr (kType == tensor::DType::kQ8_0) {
      AmxPackQ8_0(base + r * row_bytes, row_bytes, num_rows, blocks, b_ops, own_d);
    } else {
      DecodeRows<kType, 16>(base + r * row_bytes, row_bytes, num_rows, cols, dec);
      AmxPackDecoded(dec, cols, b_ops);
      packed.d = dec.d;
      packed.dmin = dec.dmin;
    }
    for (int64_t t = t_begin; t < full_end; t += 16) {
      AmxTokenTile<kType>(packed, cols, act.q + t * cols, act.d + t * blocks,
                          act.sums + t * (cols / 16), y + t * w.rows + r, w.rows, num_rows, 16);
    }
    if (full_end < t_end) {
      AmxTokenTile<kType>(packed, cols, tail.q, tail.dx, tail.sums, y + full_end * w.rows + r,
                          w.rows, num_rows, static_cast<int>(t_end - full_end));
    }
  }
  _tile_release();
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) (t_begin a multiple of 16) of n by AMX
// tiles: AmxRows32 for the 32-value formats, AmxRowsK for the K formats.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX void AmxRows(const WeightMatrix& w, const internal::QuantActivations& act,
                                int64_t n, float* y, int64_t row_begin, int64_t row_end,
                                int64_t t_begin, int64_t t_end) {
  if constexpr (QuantTraits<kType>::kK) {
    AmxRowsK<kType>(w, act, n, y, row_begin, row_end, t_begin, t_end);
  } else {
    AmxRows32<kType>(w, act, y, row_begin, row_end, t_begin, t_end);
  }
}
