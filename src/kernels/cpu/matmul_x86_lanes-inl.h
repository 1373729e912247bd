// Lanes rows: 13 to kLanesMaxTokens tokens of Q4_K and Q6_K weights on AVX-512 VNNI
// without AMX (a batched decode step's dense matrices: 16 sequences; measured on AMD Zen 5 against
// the token-group tiles, docs/PERFORMANCE.md: 1.7-2.3x at 13-32 tokens of 2048 x 1024, 1.4-1.6x
// at 48-64). Textually included by
// matmul_x86_quant-inl.h for the AVX3_DL target only, after matmul_x86_gemv-inl.h, whose 16-row
// machinery (GemvRowSet, TransposeRowWords, LaneRow, BroadcastCodes) it reuses; see matmul.h for
// the scheme.
//
// The token-group tiles (matmul_x86_vnni-inl.h) first decode 4 rows into a buffer and multiply
// per 32-value sub-block with a vpmulld per row and group: at 16 tokens the decoding and that
// bookkeeping cost more than the products. Here, as in GemvTileQ4KLanes, lane j of a register
// holds row LaneRow(j) of a 16-row tile from the start: per block, the 16 rows' bytes are
// transposed once (TransposeRowWords) into the block's values in lane order (F::Block: 4 values
// of one row per 32-bit lane, as u8), kept in L1 while passes of up to F::kPass tokens run over
// them; each token adds, per 4 values, its 4 codes broadcast times the lane's 4 values (dpbusd)
// and so forms each row's exact integers with no reduction across lanes:
//   Q4_K: 16 I_b = sum_s (16 sc_s) (sum lo a) + sc_s (sum 16 hi a) over the 8 sub-blocks of 32
//         (low nibbles & 0x0F, high nibbles & 0xF0 unshifted), I_b = 16 I_b >> 4, and
//         M_b = sum_j m_j S_j by 4 dpwssd of the rows' int16 min pairs, as GemvTileQ4KLanes;
//   Q6_K: I_b = sum_s sc_s (-32 S_s + sum (q + 32) a) over the 16 sub-blocks of 16 (vpmulld).
// Then per token the scheme's f32 chain, block after block: acc = fma(d_b * dx_b, float(I_b),
// acc) [, fma(dmin_b * dx_b, float(M_b), acc)] with acc one lane per row. The integers are the
// exact ones every path forms and the chain is the scheme's, so a token's y is the same alone,
// in any batch, pass or path. The per-token corrections (-32 S_s, the int16 pairs of S_j) are
// formed once per call (F::Corrections). A tile is F::kSets sets of 16 rows (both: 2), each
// set's block transposed on its own; a pass broadcasts each code word once for all sets: the
// broadcasts, more than the products, bound a pass (AMD Zen 5: about 1.3 vpbroadcastd from
// memory per cycle against 2 dpbusd).
//
// Another format joins with a Lanes<Format> struct (Block, Load, Pass, Corrections, kSets), a
// case in LanesFormat and its limit in LanesMaxTokens.

// Most tokens one call of the lanes rows takes (the accumulators of a tile live on the stack).
inline constexpr int kLanesMaxTokens = 64;

// Batches of GemvMaxTokens(t) + 1 to LanesMaxTokens(t) tokens of format t take the lanes rows
// when the AMX tiles do not (AVX-512 VNNI CPUs without AMX: AMD Zen 4 / 5); 0: t has none.
constexpr int LanesMaxTokens(tensor::DType t) {
  using tensor::DType;
  return t == DType::kQ4_K || t == DType::kQ6_K ? kLanesMaxTokens : 0;
}
template <tensor::DType kType>
inline constexpr bool kHasLanes = LanesMaxTokens(kType) > 0;

// The tokens of one call: codes, block scales (GemvTokens, first token t_begin) and each token's
// integer corrections, F::kCorrections int32 per block.
struct LanesTokens {
  GemvTokens tok;
  const int32_t* corr;
  int64_t corr_stride;  // int32 per token: blocks * F::kCorrections

  const int32_t* Corr(int t, int64_t b, int per_block) const {
    return corr + t * corr_stride + b * per_block;
  }
};

// The next tile's bytes for one block of this tile, asked for a part at a time over a pass's
// sub-blocks (Part(s, parts): the s-th of `parts` slices) rather than all at once before it: a
// burst of ~100 prefetches fills the core's miss buffers and stalls it until they drain.
struct LanesAsk {
  const uint8_t* begin = nullptr;  // null: nothing to ask for
  int64_t bytes = 0;
  int pass = 0, passes = 1;  // this pass of the block's passes: the slices are spread over all

  HWY_INLINE void Part(int s, int parts) const {
    if (begin == nullptr) return;
    const int64_t lines = (bytes + 63) / 64, all = int64_t{parts} * passes,
                  i = int64_t{pass} * parts + s;
    const int64_t from = lines * i / all, to = lines * (i + 1) / all;
    for (int64_t l = from; l < to; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(begin + 64 * l), _MM_HINT_T0);
    }
  }
};

// The f16 in the low (shift 0) or high (16) half of the word at block0 + each row's offset, in
// lane order (lane j: row LaneRow(j)), widened exactly.
KVSERVE_MATMUL_VNNI HWY_INLINE __m512 GatherHalfLanes(const GemvRowSet& set,
                                                      const uint8_t* block0, int shift) {
  alignas(64) int32_t lane_row[kGemvRows];
  for (int j = 0; j < kGemvRows; ++j) lane_row[j] = LaneRow(j);
  return _mm512_permutexvar_ps(_mm512_load_si512(lane_row), GatherHalf(set, block0, shift));
}

// ---- Q4_K: f16 d, f16 dmin, scales[12], qs[128] ----
struct LanesQ4K {
  static constexpr int64_t kBytes = 144;
  static constexpr int kBlock = 256;
  // Tiles of two sets of 16 rows, as Q6_K: a pass runs sub-block after sub-block (low and high
  // nibbles of a qs word apart), so each (set, token) needs a sum and the sub-block's products
  // in registers (2 x 6 of each); low and high nibbles side by side (3 registers per set and
  // token) allowed passes of 4 tokens only, measured no faster than one set (docs/PERFORMANCE.md).
  static constexpr int kPass = 6;
  static constexpr int kSets = 2;
  // The next tile's part (ask) asked for in one burst by the block's Load: spread over the
  // passes as Q6_K's, the 16-sequence steps' Q4_K rows were no faster (docs/PERFORMANCE.md).
  static constexpr bool kSpreadAsk = false;
  static constexpr int kCorrections = 4;  // S_{2p} | S_{2p + 1} << 16, p < 4
  struct Block {
    // [s][k]: values 4 k .. 4 k + 3 of sub-block s of each lane's row, from qs word 8 (s / 2) + k:
    // its low nibbles (& 0x0F) for even s, its high nibbles (& 0xF0, 16 times the value) for odd.
    __m512i nib[8][8];
    __m512i scale[8];      // sc_s, times 16 for even s (the low nibbles' sub-blocks)
    __m512i min_pairs[4];  // m_{2p} | m_{2p + 1} << 16
    __m512 d, dmin;        // d_b, -dmin_b
  };

  // Not inlined, as LanesQ6K::Load (GCC 12.2's internal compiler error in two-set tiles under
  // CI's ASan flags).
  KVSERVE_MATMUL_VNNI static HWY_NOINLINE void Load(const GemvRowSet& set, const uint8_t* row0,
                                                    int64_t b, const uint8_t* ask, Block& blk) {
    constexpr int64_t kQs = 16;
    const int64_t block = kBytes * b;
    PrefetchSpan(ask, ask + kGemvRows * kBytes);
    __m512i head[4];  // d | dmin << 16, scale bytes 0-3 (u0), 4-7 (u1), 8-11 (u2)
    TransposeRowWords(set, block, head);
    Q4KLaneScales(head[1], head[3], blk.scale);
    blk.d = HalfOfWords(head[0], 0);
    blk.dmin = NegatedDmin(head[0]);
    Q4KMinPairs(head[2], head[3], BytePairIndex(0), BytePairIndex(2), blk.min_pairs);
    const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        __m512i raw[4];
        TransposeRowWords(set, block + kQs + 32 * c + 16 * h, raw);
        for (int w = 0; w < 4; ++w) {
          blk.nib[2 * c][4 * h + w] = _mm512_and_si512(raw[w], low4);
          blk.nib[2 * c + 1][4 * h + w] = _mm512_and_si512(raw[w], high4);
        }
      }
    }
  }

  static void Corrections(const int16_t* sums, int64_t blocks, int32_t* corr) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int16_t* s = sums + 16 * b;
      for (int p = 0; p < 4; ++p) {
        // |S_j| <= 32 * 127 fits int16
        const int32_t lo = s[4 * p] + s[4 * p + 1], hi = s[4 * p + 2] + s[4 * p + 3];
        corr[4 * b + p] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                               static_cast<uint32_t>(hi) << 16);
      }
    }
  }

  template <int P, int S>
  // ask: none (kSpreadAsk false; the Pass signature is the table's, LanesPassTable).
  KVSERVE_MATMUL_VNNI static HWY_NOINLINE void Pass(const Block* blk, const LanesTokens& lt,
                                                    int64_t b, int t0, __m512* acc,
                                                    const LanesAsk& /*ask*/) {
    __m512i sum16[S][P];  // 16 I_b
    for (int q = 0; q < S; ++q) {
      for (int t = 0; t < P; ++t) sum16[q][t] = _mm512_setzero_si512();
    }
    for (int s = 0; s < 8; ++s) {
      __m512i p[S][P];  // sum over sub-block s of (value, times 16 for even s) * code
      for (int q = 0; q < S; ++q) {
        for (int t = 0; t < P; ++t) p[q][t] = _mm512_setzero_si512();
      }
      for (int k = 0; k < 8; ++k) {
        __m512i u[S];
        for (int q = 0; q < S; ++q) u[q] = blk[q].nib[s][k];
        for (int t = 0; t < P; ++t) {
          const __m512i a = BroadcastCodes(lt.tok.Q(t0 + t) + 256 * b + 32 * s + 4 * k);
          for (int q = 0; q < S; ++q) p[q][t] = _mm512_dpbusd_epi32(p[q][t], u[q], a);
        }
      }
      for (int q = 0; q < S; ++q) {
        for (int t = 0; t < P; ++t) {
          sum16[q][t] = _mm512_add_epi32(sum16[q][t], _mm512_mullo_epi32(p[q][t], blk[q].scale[s]));
        }
      }
    }
    for (int t = 0; t < P; ++t) {
      const int32_t* pairs = lt.Corr(t0 + t, b, kCorrections);
      const __m512 xv = _mm512_set1_ps(lt.tok.Dx(t0 + t)[b]);
      for (int q = 0; q < S; ++q) {
        __m512i mins = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          mins = _mm512_dpwssd_epi32(mins, blk[q].min_pairs[p], _mm512_set1_epi32(pairs[p]));
        }
        const __m512i ints = _mm512_srai_epi32(sum16[q][t], 4);
        __m512& a = acc[q * kLanesMaxTokens + t];
        a = _mm512_fmadd_ps(_mm512_mul_ps(blk[q].d, xv), _mm512_cvtepi32_ps(ints), a);
        a = _mm512_fmadd_ps(_mm512_mul_ps(blk[q].dmin, xv), _mm512_cvtepi32_ps(mins), a);
      }
    }
  }
};

// ---- Q6_K: ql[128], qh[64], scales[16] (int8), f16 d ----
// Value 128 h + 32 k + l (h < 2, k < 4, l < 32) has its low 4 bits in ql[64 h + 32 (k % 2) + l]
// (low nibble for k < 2, high for k >= 2) and its high 2 bits at bits 2k .. 2k + 1 of
// qh[32 h + l]; sub-block s = value / 16 has scale sc_s (tensor/quant_ints.h).
struct LanesQ6K {
  static constexpr int64_t kBytes = 210;
  static constexpr int kBlock = 256;
  // Tiles of two sets of 16 rows: each code word broadcast once for both (the broadcasts, not
  // the products, bound a pass of one set); passes of up to 6 tokens keep 2 x 6 sums and 2 x 6
  // products in registers.
  static constexpr int kPass = 6;
  static constexpr int kSets = 2;
  // The next tile's part asked for a slice per sub-block over the block's passes (LanesAsk):
  // qwen2moe's 16-sequence step's dense rows 12.6 -> 10.8 ms of CPU (docs/PERFORMANCE.md).
  static constexpr bool kSpreadAsk = true;
  static constexpr int kCorrections = 16;  // -32 S_s, s < 16
  struct Block {
    __m512i u[64];      // word k: values 4k .. 4k + 3 of each lane's row, as u = q + 32
    __m512i scale[16];  // sc_s as int32
    __m512 d;
  };

  // Not inlined: GCC 12.2 stops with an internal compiler error (sse.md:18022) in
  // LanesTile<Q6_K, 2> with Load inlined for both sets when built with -O2
  // -fsanitize=address,undefined (CI's ASan run); the call costs no measurable time
  // (docs/PERFORMANCE.md).
  KVSERVE_MATMUL_VNNI static HWY_NOINLINE void Load(const GemvRowSet& set, const uint8_t* row0,
                                                    int64_t b, Block& blk) {
    const int64_t block = kBytes * b;
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      __m512i ql[4][4], qh[2][4];  // [16-byte group][word]
      for (int m = 0; m < 4; ++m) TransposeRowWords(set, block + 64 * h + 16 * m, ql[m]);
      for (int m = 0; m < 2; ++m) TransposeRowWords(set, block + 128 + 32 * h + 16 * m, qh[m]);
      for (int j = 0; j < 8; ++j) {  // values l = 4 j .. 4 j + 3 of each 32
        const __m512i a = ql[j / 4][j % 4], c = ql[2 + j / 4][j % 4], hb = qh[j / 4][j % 4];
        // u = (low bits & 0x0F..) | (high bits at 4-5 & 0x30..): ternary logic 0xF8 is a | (b & c)
        auto make = [&](__m512i lo, __m512i high_at_45) HWY_ATTR {
          return _mm512_ternarylogic_epi32(_mm512_and_si512(lo, low4), high_at_45, bits45, 0xF8);
        };
        blk.u[32 * h + j] = make(a, _mm512_slli_epi32(hb, 4));
        blk.u[32 * h + 8 + j] = make(c, _mm512_slli_epi32(hb, 2));
        blk.u[32 * h + 16 + j] = make(_mm512_srli_epi32(a, 4), hb);
        blk.u[32 * h + 24 + j] = make(_mm512_srli_epi32(c, 4), _mm512_srli_epi32(hb, 2));
      }
    }
    __m512i sc[4];  // word w: sc_{4w .. 4w + 3}
    TransposeRowWords(set, block + 192, sc);
    for (int s = 0; s < 16; ++s) {
      blk.scale[s] = _mm512_srai_epi32(
          _mm512_slli_epi32(sc[s / 4], static_cast<unsigned>(24 - 8 * (s % 4))), 24);
    }
    // d is bytes 208-209: the high half of the word at 206, inside the block.
    blk.d = GatherHalfLanes(set, row0 + block + 206, 16);
  }

  static void Corrections(const int16_t* sums, int64_t blocks, int32_t* corr) {
    for (int64_t s = 0; s < 16 * blocks; ++s) corr[s] = -32 * int32_t{sums[s]};
  }

  template <int P, int S>
  KVSERVE_MATMUL_VNNI static HWY_NOINLINE void Pass(const Block* blk, const LanesTokens& lt,
                                                    int64_t b, int t0, __m512* acc,
                                                    const LanesAsk& ask) {
    __m512i ints[S][P];
    for (int q = 0; q < S; ++q) {
      for (int t = 0; t < P; ++t) ints[q][t] = _mm512_setzero_si512();
    }
    for (int s = 0; s < 16; ++s) {
      ask.Part(s, 16);
      __m512i p[S][P];  // -32 S_s + sum u a = sum q a over the sub-block (|.| <= 16 * 32 * 127)
      for (int t = 0; t < P; ++t) {
        const __m512i corr = _mm512_set1_epi32(lt.Corr(t0 + t, b, kCorrections)[s]);
        for (int q = 0; q < S; ++q) p[q][t] = corr;
      }
      for (int k = 0; k < 4; ++k) {
        __m512i u[S];
        for (int q = 0; q < S; ++q) u[q] = blk[q].u[4 * s + k];
        for (int t = 0; t < P; ++t) {
          const __m512i a = BroadcastCodes(lt.tok.Q(t0 + t) + 256 * b + 16 * s + 4 * k);
          for (int q = 0; q < S; ++q) p[q][t] = _mm512_dpbusd_epi32(p[q][t], u[q], a);
        }
      }
      for (int q = 0; q < S; ++q) {
        for (int t = 0; t < P; ++t) {
          ints[q][t] = _mm512_add_epi32(ints[q][t], _mm512_mullo_epi32(p[q][t], blk[q].scale[s]));
        }
      }
    }
    for (int t = 0; t < P; ++t) {
      const __m512 xv = _mm512_set1_ps(lt.tok.Dx(t0 + t)[b]);
      for (int q = 0; q < S; ++q) {
        __m512& a = acc[q * kLanesMaxTokens + t];
        a = _mm512_fmadd_ps(_mm512_mul_ps(blk[q].d, xv), _mm512_cvtepi32_ps(ints[q][t]), a);
      }
    }
  }
};

template <tensor::DType kType>
struct LanesFormat;
template <>
struct LanesFormat<tensor::DType::kQ4_K> : LanesQ4K {};
template <>
struct LanesFormat<tensor::DType::kQ6_K> : LanesQ6K {};

// Pass<1, S> .. Pass<F::kPass, S>, by token count - 1.
template <typename F, int S, size_t... kIdx>
constexpr auto LanesPassTable(std::index_sequence<kIdx...>) {
  using PassFn =
      void (*)(const typename F::Block*, const LanesTokens&, int64_t, int, __m512*, const LanesAsk&);
  return std::array<PassFn, sizeof...(kIdx)>{&F::template Pass<static_cast<int>(kIdx) + 1, S>...};
}

// y[t, i] for tokens t < n (n <= kLanesMaxTokens) of lt and rows i < num_rows of the 16 S rows
// from row0 (row_bytes apart; S sets of 16, num_rows > 16 (S - 1)): block after block, each
// set's block in lane order once, then passes of at most F::kPass tokens, as even as the count
// allows (13 tokens: 6 + 7), each token's codes broadcast once for all S sets.
template <typename F, int S>
KVSERVE_MATMUL_VNNI HWY_NOINLINE void LanesTile(const uint8_t* row0, int64_t row_bytes,
                                                int num_rows, int64_t blocks, const LanesTokens& lt,
                                                int n, float* y, int64_t y_stride) {
  static constexpr auto kPasses = LanesPassTable<F, S>(std::make_index_sequence<F::kPass>());
  GemvRowSet sets[S];
  for (int q = 0; q < S; ++q) {
    sets[q] = MakeRowSet(row0 + q * kGemvRows * row_bytes, row_bytes,
                         std::min(kGemvRows, num_rows - q * kGemvRows));
  }
  const int num_passes = (n + F::kPass - 1) / F::kPass;
  __m512 acc[S * kLanesMaxTokens];
  for (int q = 0; q < S; ++q) {
    for (int t = 0; t < n; ++t) acc[q * kLanesMaxTokens + t] = _mm512_setzero_ps();
  }
  // The next tile's bytes (S * 16 rows, contiguous) stream in while this one computes: while
  // block b is read, part b of them, the lines in address order (before the block's Load, or
  // over its passes: F::kSpreadAsk). Against asking for each of the next tile's rows' block b
  // (the same lines in 16 strided runs): 32000 x 1024 Q6_K at 16 tokens with the weights from
  // memory 1.2-1.35x faster (BM_MatMulCold, AMD Zen 5).
  const uint8_t* next = row0 + NextTileDistance(row0, row_bytes, S * kGemvRows);
  typename F::Block blk[S];
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* part = next + kGemvRows * F::kBytes * S * b;  // the next tile's part b
    for (int q = 0; q < S; ++q) {
      if constexpr (F::kSpreadAsk) {
        F::Load(sets[q], row0 + q * kGemvRows * row_bytes, b, blk[q]);
      } else {  // the burst in the block's Load
        F::Load(sets[q], row0 + q * kGemvRows * row_bytes, b, part + kGemvRows * F::kBytes * q,
                blk[q]);
      }
    }
    // Q6_K asks for the next tile's part b over the block's passes, a slice per sub-block.
    for (int p = 0, t0 = 0; p < num_passes; ++p) {
      const int count = (n - t0) / (num_passes - p);
      const LanesAsk ask =
          F::kSpreadAsk ? LanesAsk{part, S * kGemvRows * F::kBytes, p, num_passes} : LanesAsk{};
      kPasses[count - 1](blk, lt, b, t0, acc + t0, ask);
      t0 += count;
    }
  }
  alignas(64) int32_t lane_row[kGemvRows];
  for (int j = 0; j < kGemvRows; ++j) lane_row[j] = LaneRow(j);
  const __m512i to_rows = _mm512_load_si512(lane_row);
  for (int q = 0; q < S; ++q) {
    const int rows = std::min(kGemvRows, num_rows - q * kGemvRows);
    const auto mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int t = 0; t < n; ++t) {
      _mm512_mask_storeu_ps(y + t * y_stride + q * kGemvRows, mask,
                            _mm512_permutexvar_ps(to_rows, acc[q * kLanesMaxTokens + t]));
    }
  }
}

// Rows [row_begin, row_end) x tokens [t_begin, t_end) (at most kLanesMaxTokens) of a kHasLanes
// format, tiles of F::kSets sets of 16 rows (a last 16 rows or fewer as one set). The corrections
// go to a per-thread buffer that grows, never shrinks.
template <tensor::DType kType>
KVSERVE_MATMUL_VNNI void LanesRows(const WeightMatrix& w, const internal::QuantActivations& act,
                                   float* y, int64_t row_begin, int64_t row_end, int64_t t_begin,
                                   int64_t t_end) {
  using F = LanesFormat<kType>;
  const int64_t cols = w.cols, blocks = cols / F::kBlock;
  const int n = static_cast<int>(t_end - t_begin);
  thread_local std::vector<int32_t> corrections;
  const int64_t corr_stride = blocks * F::kCorrections;
  if (corrections.size() < static_cast<size_t>(n * corr_stride)) {
    corrections.resize(static_cast<size_t>(n * corr_stride));
  }
  for (int t = 0; t < n; ++t) {
    F::Corrections(act.sums + (t_begin + t) * (cols / 16), blocks,
                   corrections.data() + t * corr_stride);
  }
  const LanesTokens lt{{act.q + t_begin * cols, act.d + t_begin * blocks,
                        act.sums + t_begin * (cols / 16), cols, blocks},
                       corrections.data(), corr_stride};
  const int64_t row_bytes = tensor::RowBytes(kType, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  // The first tile was asked for by no earlier tile: ask for all of it at once rather than
  // wait for its blocks one after another.
  constexpr int kTileRows = F::kSets * kGemvRows;
  PrefetchSpan(base + row_begin * row_bytes,
               base + std::min<int64_t>(row_end, row_begin + kTileRows) * row_bytes);
  for (int64_t r = row_begin; r < row_end;) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kTileRows, row_end - r));
    float* y_rows = y + t_begin * w.rows + r;
    if (F::kSets == 2 && num_rows > kGemvRows) {
      LanesTile<F, 2>(base + r * row_bytes, row_bytes, num_rows, blocks, lt, n, y_rows, w.rows);
      r += num_rows;
    } else {
      const int rows = std::min(kGemvRows, num_rows);
      LanesTile<F, 1>(base + r * row_bytes, row_bytes, rows, blocks, lt, n, y_rows, w.rows);
      r += rows;
    }
  }
}
