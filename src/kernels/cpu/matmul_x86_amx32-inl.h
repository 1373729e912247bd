// AMX int8 tiles for the 32-value formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) on
// batches. Textually included by matmul_x86_quant-inl.h after matmul_x86_amx-inl.h (its
// KVSERVE_MATMUL_AMX and AmxTileConfig), AVX3_DL target only; see matmul.h for the scheme.
//
// Tokens are the A operand: a tile C of 16 tokens x 16 weight rows is A (16 tokens x 32 codes of
// one block: one 512-byte run of QuantActivations::q_groups) times B (the
// block's 32 values of the 16 rows as int8, 8 rows of [16 weight rows][4], packed once per row
// tile). tdpbssd forms I_b exactly; M_b (Q4_1 / Q5_1) is S_b, the token's code sum of the block.
// Row j of C holds token j's 16 output rows, so the f32 chain of the scheme runs with the 16
// weight rows in the lanes, one register per token (kept in registers across all blocks), and a
// token's results go to y as one contiguous store: no gather.
//
// Tiles: C of block b in tmm(b & 3), A in tmm(4 + (b & 1)), B in tmm(6 + (b & 1)). Stage s
// multiplies block s, stores C of block s - 2 and runs the f32 chain of block s - 3: four C
// tiles keep the tile unit busy while a C is stored (tiles are not renamed: a tile written
// waits for the last instruction reading it), and the chain reads C one stage after its tile
// store (a vector load of a tile store's bytes waits for the store).

// The B operands and factors of a 16-row tile: b_ops [blocks][8][16][4] int8 (B row k of block
// b = values 4 k .. 4 k + 3 of each of the 16 rows), d / dmin [blocks][16] f32 (dmin only for
// Q4_1 / Q5_1). Per-thread buffer (d / dmin may point into the decode buffer instead).
struct AmxPacked32 {
  int8_t* b_ops;
  const float* d;
  const float* dmin;
};

KVSERVE_MATMUL_AMX HWY_INLINE void AmxConfigure32() {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = t < 6 ? 16 : 8;        // C, A: 16 tokens; B: 32 values / 4
    cfg.colsb[t] = t < 4 || t >= 6 ? 64 : 32;  // A: 32 codes
  }
  AmxLoadConfig(cfg);
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

// Loads block b's A (16 token rows of 32 codes) and B into set kSet % 2 and multiplies into C
// tile kSet. (The tile intrinsics take literal register numbers.)
template <int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxIssue32(const int8_t* a, int64_t cols, const int8_t* b) {
  if constexpr (kSet % 2 == 0) {
    _tile_loadd(4, a, cols);
    _tile_loadd(6, b, 64);
  } else {
    _tile_loadd(5, a, cols);
    _tile_loadd(7, b, 64);
  }
  if constexpr (kSet == 0) _tile_dpbssd(0, 4, 6);
  if constexpr (kSet == 1) _tile_dpbssd(1, 5, 7);
  if constexpr (kSet == 2) _tile_dpbssd(2, 4, 6);
  if constexpr (kSet == 3) _tile_dpbssd(3, 5, 7);
}

// Stores C tile kSet to c[16][16] and zeroes it.
template <int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxDrain32(int32_t* c) {
  if constexpr (kSet == 0) {
    _tile_stored(0, c, 64);
    _tile_zero(0);
  } else if constexpr (kSet == 1) {
    _tile_stored(1, c, 64);
    _tile_zero(1);
  } else if constexpr (kSet == 2) {
    _tile_stored(2, c, 64);
    _tile_zero(2);
  } else {
    _tile_stored(3, c, 64);
    _tile_zero(3);
  }
}

// The 16 accumulators of a token tile, v<j> lanes = token j's 16 rows. Named members, not an
// array: GCC keeps an array of 16 vectors in memory, these stay in registers.
struct AmxAcc16 {
  __m512 v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15;

  template <int kJ>
  HWY_INLINE __m512& Get() {
    static_assert(kJ >= 0 && kJ < 16);
    __m512* const v[16] = {&v0, &v1, &v2,  &v3,  &v4,  &v5,  &v6,  &v7,
                           &v8, &v9, &v10, &v11, &v12, &v13, &v14, &v15};
    return *v[kJ];
  }
};

// The f32 chain of block b for token kJ: acc += (d_w * d_x) * I (+ (dmin_w * d_x) * S).
// dxg: the group's d_groups, c: block b's C, sums: the group's first row of code sums.
template <tensor::DType kType, int kJ>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinishToken(const AmxPacked32& w, const int32_t* c,
                                                  const float* dxg, const int16_t* sums,
                                                  int64_t cols, int64_t b, __m512 dv,
                                                  __m512& acc) {
  const __m512 xv = _mm512_set1_ps(dxg[16 * b + kJ]);
  const __m512 ints = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * kJ));
  acc = _mm512_fmadd_ps(_mm512_mul_ps(dv, xv), ints, acc);
  if constexpr (QuantTraits<kType>::kHasMin) {
    const int16_t* s = sums + kJ * (cols / 16) + 2 * b;
    const __m512 dm = _mm512_loadu_ps(w.dmin + 16 * b);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dm, xv), _mm512_set1_ps(static_cast<float>(s[0] + s[1])),
                          acc);
  }
}

// The f32 chain of block b for the 16 tokens.
template <tensor::DType kType, size_t... kJ>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFinish32(const AmxPacked32& w, const int32_t* c,
                                               const float* dxg, const int16_t* sums,
                                               int64_t cols, int64_t b, AmxAcc16& acc,
                                               std::index_sequence<kJ...>) {
  const __m512 dv = _mm512_loadu_ps(w.d + 16 * b);
  (AmxFinishToken<kType, static_cast<int>(kJ)>(w, c, dxg, sums, cols, b, dv, acc.Get<kJ>()),
   ...);
}

// The operands of one token tile (see AmxTokenTile).
struct AmxTileArgs {
  const AmxPacked32* w;
  int64_t cols, blocks;
  const int8_t* q;
  const float* dxg;
  const int16_t* sums;
  int32_t (*c)[256];  // four blocks' C
};

// Stage s of the pipeline above (kSet = s % 4).
template <tensor::DType kType, int kSet>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStage32(const AmxTileArgs& t, int64_t s, AmxAcc16& acc) {
  if (s < t.blocks) AmxIssue32<kSet>(t.q + 512 * s, 32, t.w->b_ops + 512 * s);
  if (s >= 2 && s - 2 < t.blocks) AmxDrain32<(kSet + 2) % 4>(t.c[(s - 2) & 3]);
  if (s >= 3 && s - 3 < t.blocks) {
    AmxFinish32<kType>(*t.w, t.c[(s - 3) & 3], t.dxg, t.sums, t.cols, s - 3, acc,
                       std::make_index_sequence<16>{});
  }
}

template <size_t... kJ>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStoreTokens(AmxAcc16& acc, float* y, int64_t y_stride,
                                                  int num_rows, int num_tokens,
                                                  std::index_sequence<kJ...>) {
  const __mmask16 rows_mask = static_cast<__mmask16>((1u << num_rows) - 1);
  ((static_cast<int>(kJ) < num_tokens
        ? _mm512_mask_storeu_ps(y + kJ * y_stride, rows_mask, acc.Get<kJ>())
        : void()),
   ...);
}

// y rows [0, num_rows) of a tile for tokens [0, num_tokens) of a group of 16: q and dxg the
// group's q_groups and d_groups, sums its first row of code sums (stride cols / 16), y the
// tile's y[0, 0]. C tiles 0-3 are zero on entry and on return.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_NOINLINE void AmxTokenTile(const AmxPacked32& w, int64_t cols,
                                                  const int8_t* q, const float* dxg,
                                                  const int16_t* sums, float* y, int64_t y_stride,
                                                  int num_rows, int num_tokens) {
  alignas(64) int32_t c[4][256];
  const AmxTileArgs t{&w, cols, cols / 32, q, dxg, sums, c};
  const __m512 zero = _mm512_setzero_ps();
  AmxAcc16 acc{zero, zero, zero, zero, zero, zero, zero, zero,
               zero, zero, zero, zero, zero, zero, zero, zero};
  for (int64_t s = 0; s < t.blocks + 3; s += 4) {
    AmxStage32<kType, 0>(t, s, acc);
    AmxStage32<kType, 1>(t, s + 1, acc);
    AmxStage32<kType, 2>(t, s + 2, acc);
    AmxStage32<kType, 3>(t, s + 3, acc);
  }
  AmxStoreTokens(acc, y, y_stride, num_rows, num_tokens, std::make_index_sequence<16>{});
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

// The code sums of activation rows [t_begin, t_end) (fewer than 16) in the calling thread's
// buffer, zero-padded to 16 rows ([16][cols / 16] int16).
HWY_INLINE const int16_t* AmxTailSums32(const internal::QuantActivations& act, int64_t cols,
                                        int64_t t_begin, int64_t t_end) {
  thread_local std::vector<int16_t> buffer;
  buffer.assign(static_cast<size_t>(16 * (cols / 16)), 0);
  std::copy(act.sums + t_begin * (cols / 16), act.sums + t_end * (cols / 16), buffer.begin());
  return buffer.data();
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
  const int16_t* tail_sums = QuantTraits<kType>::kHasMin && full_end < t_end
                                 ? AmxTailSums32(act, cols, full_end, t_end)
                                 : nullptr;
  AmxConfigure32();
  AmxZeroCTiles();
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
    for (int64_t t = t_begin; t < t_end; t += 16) {
      AmxTokenTile<kType>(packed, cols, act.q_groups + t * cols, act.d_groups + t * blocks,
                          t < full_end ? act.sums + t * (cols / 16) : tail_sums,
                          y + t * w.rows + r, w.rows, num_rows,
                          static_cast<int>(std::min<int64_t>(16, t_end - t)));
    }
  }
  _tile_release();
}
