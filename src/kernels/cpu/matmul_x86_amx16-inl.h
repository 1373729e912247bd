// AMX int8 tiles for one group of 16 tokens (a batched decode step's 16 sequences) and Q4_K or
// Q6_K weights. Textually included by matmul_x86_quant-inl.h after matmul_x86_amx-inl.h (its
// tiles, fill and f32 chain), AVX3_DL target only; see matmul.h for the scheme and
// matmul_x86_amx-inl.h for the integers.
//
// AmxRowsK fills a whole 16-row tile's parts (2 x 16 x cols bytes: 48 KiB at 768 columns, more
// than L1) and then runs the blocks one after the other, each waiting for its two C tiles'
// chains of four multiplies, its drain and its f32 chain. With one token group those waits are
// the whole cost (measured: a 32000 x 768 Q4_K matmul of 16 tokens took 5x one token's time).
// Here the tile runs block by block as a pipeline over four C tiles:
//   stage b: multiply block b (its parts filled in stage b - 1, into buffer b % 2 of one block:
//   8 KiB) into C tiles (b % 2, 2 + b % 2); fill block b + 1 into the other buffer while the
//   tile unit works; drain block b - 1's C tiles and run its f32 chain.
// Same integers and the same f32 chain per block (AmxFinishBlockK), so the same bits.
//
// Tiles: C of part p and block parity k in tmm(2 p + k), A of part p in tmm(4 + p), B in tmm6
// (one group); the tile configuration is AmxConfigure's.

// Multiplies block b (kOdd = b % 2) of the tile: A parts from `parts` ([2][16][256]), B the
// group's codes from q (TokenGroups' q layout).
template <int kOdd>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxIssueBlock16(const int8_t* parts, const uint8_t* q,
                                                   int64_t b) {
  for (int s = 0; s < 256 / kAmxK; ++s) {
    const int64_t first = 256 * b + kAmxK * s;
    _tile_loadd(4, parts + kAmxK * s, 256);
    _tile_loadd(6, q + 16 * first, 64);
    _tile_loadd(5, parts + 16 * 256 + kAmxK * s, 256);
    if constexpr (kOdd == 0) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbssd(2, 5, 6);
    } else {
      _tile_dpbusd(1, 4, 6);
      _tile_dpbssd(3, 5, 6);
    }
  }
}

// Stores block parity kOdd's C tiles to c[0] (part l) and c[1] (part h) and zeroes them.
template <int kOdd>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxDrainBlock16(int32_t (*c)[256]) {
  if constexpr (kOdd == 0) {
    _tile_stored(0, c[0], 64);
    _tile_zero(0);
    _tile_stored(2, c[1], 64);
    _tile_zero(2);
  } else {
    _tile_stored(1, c[0], 64);
    _tile_zero(1);
    _tile_stored(3, c[1], 64);
    _tile_zero(3);
  }
}

// Everything one 16-row tile's pipeline reads and writes.
struct AmxTile16Args {
  const uint8_t* row0;
  int64_t row_bytes, cols, blocks;
  int num_rows;
  int8_t* parts;  // two buffers of one block's parts, [2][2][16][256]
  const uint8_t* q;
  const float* dx;
  const int32_t* sums;
  const AmxParts* mins;  // the tile's min pairs (AmxParts::mins)
  const DecodedRows* dec;  // d / dmin at [b * 16 + r]
  float (*acc)[16];
};

// Fills block b's parts into buffer b % 2.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxFillBlock16(const AmxTile16Args& t, int64_t b) {
  AmxFillPartsInPlace<kType>(
      t.row0, t.row_bytes, t.num_rows, t.cols,
      {b, b + 1, t.parts + (b & 1) * 2 * 16 * 256, 256, t.mins->mins, t.dec->d, t.dec->dmin});
}

// Stage b of the pipeline (kOdd = b % 2): multiply block b, fill block b + 1, drain and finish
// block b - 1.
template <tensor::DType kType, int kOdd>
KVSERVE_MATMUL_AMX HWY_INLINE void AmxStage16(const AmxTile16Args& t, int64_t b,
                                              int32_t (*c)[256]) {
  if (b < t.blocks) AmxIssueBlock16<kOdd>(t.parts + (b & 1) * 2 * 16 * 256, t.q, b);
  if (b + 1 < t.blocks) AmxFillBlock16<kType>(t, b + 1);
  if (b >= 1 && b - 1 < t.blocks) {
    AmxDrainBlock16<1 - kOdd>(c);
    AmxFinishBlockK<kType>(c[0], c[1], t.dx, t.sums, t.mins->mins, *t.dec, t.cols, b - 1, t.acc);
  }
}

// Rows [row_begin, row_end) x tokens [0, n), n <= 16, of Q4_K or Q6_K by the pipeline above;
// the calling thread's tile state is configured here and released at the end.
template <tensor::DType kType>
KVSERVE_MATMUL_AMX void AmxRowsK16(const WeightMatrix& w, const internal::QuantActivations& act,
                                   int64_t n, float* y, int64_t row_begin, int64_t row_end) {
  static_assert(kType == tensor::DType::kQ4_K || kType == tensor::DType::kQ6_K);
  const int64_t cols = w.cols, blocks = cols / 256;
  const int64_t row_bytes = tensor::RowBytes(kType, cols);
  const DecodedRows dec = DecodeBuffer(16, cols);
  const AmxParts mins = AmxPartsBuffer(cols);  // its min pairs (the parts are `parts` below)
  alignas(64) int8_t parts[2 * 2 * 16 * 256];
  const internal::TokenGroups layout{cols, 256, 1};
  const auto* base = static_cast<const uint8_t*>(w.data);
  alignas(64) int32_t c[2][256];
  alignas(64) float acc[16][16];
  AmxTile16Args t{nullptr, row_bytes, cols, blocks, 0, parts, act.staging + layout.QOffset(0),
                  reinterpret_cast<const float*>(act.staging + layout.DOffset(0)),
                  reinterpret_cast<const int32_t*>(act.staging + layout.SumsOffset(0)), &mins,
                  &dec, acc};
  AmxConfigure();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t r = row_begin; r < row_end; r += 16) {
    t.row0 = base + r * row_bytes;
    t.num_rows = static_cast<int>(std::min<int64_t>(16, row_end - r));
    std::memset(acc, 0, sizeof(acc));
    AmxFillBlock16<kType>(t, 0);
    for (int64_t b = 0; b <= blocks; b += 2) {
      AmxStage16<kType, 0>(t, b, c);
      AmxStage16<kType, 1>(t, b + 1, c);
    }
    AmxStoreByToken(acc, y + r, w.rows, 0, n, t.num_rows);
  }
  _tile_release();
}
