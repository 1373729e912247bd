// Per-target attention arithmetic (re-included once per Highway target by attention.cc and
// latent_attention.cc): K/V conversion, the 16-key chunk step, the partition fold.
//
// Implements the numerics contract of attention.h with "16 logical lanes": one AVX-512
// register, two AVX2 registers, four SSE4 registers or sixteen scalars, lane by lane the same
// float operations, so every target computes the same bits. Targets without hardware FMA
// evaluate fma lane by lane with std::fma (slow, exact). A softmax state (attention.h) is
// stored as floats [acc (padded_hd)][L (16)][m][15 unused].
#if defined(KVSERVE_KERNELS_CPU_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_ATTENTION_INL_H_
#undef KVSERVE_KERNELS_CPU_ATTENTION_INL_H_
#else
#define KVSERVE_KERNELS_CPU_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "hwy/highway.h"
#include "kernels/cpu/attention_exp.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/exp-inl.h"
#include "kernels/cpu/kv_dequant.h"
#include "tensor/quant.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
#include "kernels/cpu/attention_convert-inl.h"

namespace kvserve::kernels::HWY_NAMESPACE {

constexpr int kLanes = 16;
constexpr int kVecs = kLanes / static_cast<int>(kN);  // vectors per 16 logical lanes
constexpr int kChunk = AttentionScratch::kKeyChunk;
constexpr int kPartition = AttentionScratch::kPartition;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// fma(a, b, c) rounded once, on every target.
HWY_INLINE VF Fma(VF a, VF b, VF c) { return ExactFma(DF(), a, b, c); }

// AttentionExp (attention_exp.h) lane by lane.
HWY_INLINE VF Exp(VF x) { return AttentionExpLanes(DF(), x); }

// kN values of a K/V row: f32 tile rows, or F16 rows of the cache read in place (widened
// exactly, as ConvertChunk widens them: the same floats either way).
HWY_INLINE VF LoadKv(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE VF LoadKv(const uint16_t* p) { return HalvesToFloats(reinterpret_cast<const uint8_t*>(p)); }

HWY_INLINE float ExpScalar(float x) {
  return hn::GetLane(Exp(hn::Set(DF(), x)));
}

// Sum of 16 lanes by halving (l += l + 8, + 4, + 2, + 1).
HWY_INLINE float TreeSum16(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// kt[d * 16 + j] = rows[j * row_stride + d] for the 16 rows j of a tile and d < hd rounded up
// to 16: the keys of a chunk transposed, so that one vector holds dimension d of every key
// (16 keys in 16 lanes). note: row_stride >= hd rounded up to 16.
HWY_INLINE void TransposeKeys(const float* rows, int row_stride, int hd, float* kt) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  for (int d0 = 0; d0 < hd; d0 += 16) {
    __m512 a[16], b[16];
    for (int i = 0; i < 8; ++i) {  // rows 2i, 2i + 1 interleaved within each 128-bit lane
      const __m512 x = _mm512_loadu_ps(rows + static_cast<int64_t>(2 * i) * row_stride + d0);
      const __m512 y = _mm512_loadu_ps(rows + static_cast<int64_t>(2 * i + 1) * row_stride + d0);
      a[2 * i] = _mm512_unpacklo_ps(x, y);
      a[2 * i + 1] = _mm512_unpackhi_ps(x, y);
    }
    // b[4k + e], 128-bit lane L: element 4L + e of rows 4k .. 4k + 3.
    for (int k = 0; k < 4; ++k) {
      b[4 * k] = _mm512_shuffle_ps(a[4 * k], a[4 * k + 2], 0x44);
      b[4 * k + 1] = _mm512_shuffle_ps(a[4 * k], a[4 * k + 2], 0xEE);
      b[4 * k + 2] = _mm512_shuffle_ps(a[4 * k + 1], a[4 * k + 3], 0x44);
      b[4 * k + 3] = _mm512_shuffle_ps(a[4 * k + 1], a[4 * k + 3], 0xEE);
    }
    // Output row 4L + e: lane L of b[e], b[4 + e], b[8 + e], b[12 + e] (a 4 x 4 lane transpose).
    for (int e = 0; e < 4; ++e) {
      const __m512 c0 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0x44);
      const __m512 c1 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0xEE);
      const __m512 c2 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0x44);
      const __m512 c3 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0xEE);
      float* out = kt + static_cast<int64_t>(d0 + e) * 16;
      _mm512_storeu_ps(out, _mm512_shuffle_f32x4(c0, c2, 0x88));
      _mm512_storeu_ps(out + 4 * 16, _mm512_shuffle_f32x4(c0, c2, 0xDD));
      _mm512_storeu_ps(out + 8 * 16, _mm512_shuffle_f32x4(c1, c3, 0x88));
      _mm512_storeu_ps(out + 12 * 16, _mm512_shuffle_f32x4(c1, c3, 0xDD));
    }
  }
#else
  for (int d = 0; d < (hd + 15) / 16 * 16; ++d) {
    for (int j = 0; j < kChunk; ++j) kt[d * kChunk + j] = rows[static_cast<int64_t>(j) * row_stride + d];
  }
#endif
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// On AVX-512 the scores of a chunk's keys are computed from its rows in register tiles
// (ScoresTiled), so items never transpose keys: TransposeKeys costs more than it saves there.
inline constexpr bool kTiledScores = true;

// The halving tree of 16 keys' lane sums at once (a transpose-and-add network): lanes[i] holds
// the 16 lane sums of key (i % 4) * 4 + i / 4; key j's total ends in lane j. Each stage adds,
// per key, exactly the lanes the scalar tree adds.
HWY_INLINE __m512 SumKeyLanes(const __m512* lanes) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i) {  // l += l + 8
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(lanes[2 * i], lanes[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(lanes[2 * i], lanes[2 * i + 1], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {  // l += l + 4
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int i = 0; i < 2; ++i) {  // l += l + 2
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores (below) of kQ queries over the 16 keys at once: tiles of kQ queries x 4 keys share
// each load of a query and a key; each (query, key)'s 16 lane sums go through memory to
// SumKeyLanes. The same operations per (query, key), so the same bits.
// kDims: padded_hd when known at compile time (loops unrolled), else 0. kKeys: keys per tile
// (4, or 2 where 4 queries' held q at 64 dims and 4 x 4 accumulators would spill registers).
template <int kQ, typename T, int kDims = 0, int kKeys = 4>
HWY_INLINE void ScoresTiled(const float* const* q, const T* keys, int padded_hd, float scale,
                            VF (*s)[kVecs]) {
  if constexpr (kDims > 0) padded_hd = kDims;
  alignas(64) float lanes[kQ][kChunk][kLanes];  // [query][slot of SumKeyLanes][lane]
  for (int g = 0; g < kChunk / kKeys; ++g) {    // keys kKeys * g + k, k < kKeys
    const T* k0 = keys + static_cast<int64_t>(kKeys * g) * padded_hd;
    __m512 acc[kQ][kKeys];
    {
      __m512 kv[kKeys];
      for (int k = 0; k < kKeys; ++k) kv[k] = LoadKv(k0 + k * padded_hd).raw;
      for (int i = 0; i < kQ; ++i) {
        const __m512 qv = _mm512_loadu_ps(q[i]);
        for (int k = 0; k < kKeys; ++k) acc[i][k] = _mm512_mul_ps(qv, kv[k]);
      }
    }
    for (int c = kLanes; c < padded_hd; c += kLanes) {
      __m512 kv[kKeys];
      for (int k = 0; k < kKeys; ++k) kv[k] = LoadKv(k0 + k * padded_hd + c).raw;
      for (int i = 0; i < kQ; ++i) {
        const __m512 qv = _mm512_loadu_ps(q[i] + c);
        for (int k = 0; k < kKeys; ++k) acc[i][k] = _mm512_fmadd_ps(qv, kv[k], acc[i][k]);
      }
    }
    for (int i = 0; i < kQ; ++i) {  // key j sits in slot (j % 4) * 4 + j / 4
      for (int k = 0; k < kKeys; ++k) {
        const int j = kKeys * g + k;
        _mm512_store_ps(lanes[i][(j % 4) * 4 + j / 4], acc[i][k]);
      }
    }
  }
  for (int i = 0; i < kQ; ++i) {
    __m512 l[kChunk];
    for (int j = 0; j < kChunk; ++j) l[j] = _mm512_load_ps(lanes[i][j]);
    s[i][0] = hn::Mul(VF{SumKeyLanes(l)}, hn::Set(DF(), scale));
  }
}
#else
inline constexpr bool kTiledScores = false;
#endif

// Scores s[j] = scale * dot(q, k_j) for the 16 keys of a tile (key j at keys + j * padded_hd),
// as 16 logical lanes in s[0 .. kVecs). kDims: padded_hd when known at compile time (64, 128:
// loops unrolled, q held in registers), else 0.
template <int kDims, typename T>
HWY_INLINE void Scores(const float* q, const T* keys, int padded_hd, float scale, VF* s) {
  const DF d;
  if constexpr (kDims > 0) padded_hd = kDims;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  __m512 lanes[16];  // slot i: key (i % 4) * 4 + i / 4 (SumKeyLanes)
  for (int i = 0; i < 16; ++i) {
    const T* k = keys + static_cast<int64_t>((i % 4) * 4 + i / 4) * padded_hd;
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), LoadKv(k).raw);
    for (int c = 16; c < padded_hd; c += 16) {
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), LoadKv(k + c).raw, acc);
    }
    lanes[i] = acc;
  }
  s[0] = hn::Mul(VF{SumKeyLanes(lanes)}, hn::Set(d, scale));
#else
  HWY_ALIGN float dots[kLanes];
  for (int j = 0; j < kChunk; ++j) {
    const T* k = keys + static_cast<int64_t>(j) * padded_hd;
    HWY_ALIGN float lanes[kLanes];
    for (int v = 0; v < kVecs; ++v) {
      VF acc = hn::Mul(hn::LoadU(d, q + v * kN), LoadKv(k + v * kN));
      for (int c = kLanes; c < padded_hd; c += kLanes) {
        acc = Fma(hn::LoadU(d, q + c + v * kN), LoadKv(k + c + v * kN), acc);
      }
      hn::Store(acc, d, lanes + v * kN);
    }
    dots[j] = TreeSum16(lanes);
  }
  for (int v = 0; v < kVecs; ++v) s[v] = hn::Mul(hn::Load(d, dots + v * kN), hn::Set(d, scale));
#endif
}

// The same scores (bit for bit) for kP queries (1 or 2) from the tile's keys transposed in kt
// (TransposeKeys): the contract's lane sums P_l (l < 16) for the 16 keys at once, one vector
// over the keys each, then the halving tree as vector adds, with no shuffles. P_l and P_l+8
// are computed one after the other and added at once (the tree's first level), so two
// queries share each load of kt in 16 + 2 registers each. Worth the transposition when many
// queries share the tile (a prefill tile, a GQA group); the padding rows of kt are zero.
// kDims: padded_hd when it is known at compile time (64, 128: loops fully unrolled), else 0.
template <int kP, int kDims>
HWY_INLINE void ScoresTransposed(const float* const* q, const float* kt, int padded_hd,
                                 float scale, VF (*s)[kVecs]) {
  const DF d;
  constexpr int kHalf = kLanes / 2;
  if constexpr (kDims > 0) padded_hd = kDims;
  for (int v = 0; v < kVecs; ++v) {
    const float* col = kt + v * kN;
    auto chain = [&](int l, VF* out) HWY_ATTR {  // out[i] = P_l of query i
      const VF k = hn::LoadU(d, col + l * kChunk);
      for (int i = 0; i < kP; ++i) out[i] = hn::Mul(hn::Set(d, q[i][l]), k);
      for (int c = kLanes; c < padded_hd; c += kLanes) {
        const VF kc = hn::LoadU(d, col + (c + l) * kChunk);
        for (int i = 0; i < kP; ++i) out[i] = Fma(hn::Set(d, q[i][c + l]), kc, out[i]);
      }
    };
    VF lanes[kHalf][kP];
    for (int l = 0; l < kHalf; ++l) {
      VF high[kP];
      chain(l, lanes[l]);
      chain(l + kHalf, high);
      for (int i = 0; i < kP; ++i) lanes[l][i] = hn::Add(lanes[l][i], high[i]);
    }
    for (int width = kHalf / 2; width >= 1; width /= 2) {
      for (int l = 0; l < width; ++l) {
        for (int i = 0; i < kP; ++i) lanes[l][i] = hn::Add(lanes[l][i], lanes[l + width][i]);
      }
    }
    for (int i = 0; i < kP; ++i) s[i][v] = hn::Mul(lanes[0][i], hn::Set(d, scale));
  }
}

// Logit soft-capping (AttentionShape::softcap): s = softcap * tanh(s / softcap) per lane, with
// the scalar libm tanh so every SIMD target computes the same bits.
HWY_INLINE void SoftCap(float softcap, VF* s) {
  const DF d;
  HWY_ALIGN float lanes[kLanes];
  for (int v = 0; v < kVecs; ++v) hn::Store(s[v], d, lanes + v * kN);
  for (float& x : lanes) x = softcap * std::tanh(x / softcap);
  for (int v = 0; v < kVecs; ++v) s[v] = hn::Load(d, lanes + v * kN);
}

// For each of kQ queries i: acc_i[0, kV * kN) = acc_i * alpha_i (unless alpha_i == 1), then
// acc_i += p_i[j] * values[j] for j in [a, b). The queries share each load of a value row.
template <int kQ, int kV, typename T>
HWY_INLINE void AccumulateValues(float* const* acc, int offset, const T* values,
                                 int padded_hd, const float (*p)[kLanes], const float* alpha,
                                 int a, int b) {
  const DF d;
  VF sum[kQ][kV];
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kV; ++v) sum[i][v] = hn::LoadU(d, acc[i] + offset + v * kN);
    if (alpha[i] != 1.0f) {
      for (int v = 0; v < kV; ++v) sum[i][v] = hn::Mul(sum[i][v], hn::Set(d, alpha[i]));
    }
  }
  for (int j = a; j < b; ++j) {
    const T* row = values + static_cast<int64_t>(j) * padded_hd + offset;
    VF value[kV];
    for (int v = 0; v < kV; ++v) value[v] = LoadKv(row + v * kN);
    for (int i = 0; i < kQ; ++i) {
      const VF pj = hn::Set(d, p[i][j]);
      for (int v = 0; v < kV; ++v) sum[i][v] = Fma(pj, value[v], sum[i][v]);
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kV; ++v) hn::StoreU(sum[i][v], d, acc[i] + offset + v * kN);
  }
}

// One online-softmax step (attention.h) of kQ queries over the same tile keys [a, b):
// q[i] (padded_hd floats) updates the state at state[i]. keys, values: the tile's rows,
// padded_hd apart; kt: its keys transposed (TransposeKeys), or null to read the rows;
// softcap > 0 soft-caps the scores; padded_vd > 0: only acc[0, padded_vd) accumulates values
// (internal::PaddedValueDim), else all padded_hd.
template <int kQ, typename T>
HWY_INLINE void UpdateChunks(const float* const* q, float* const* state, const T* keys,
                             const float* kt, const T* values, int padded_hd, float scale,
                             int a, int b, float softcap = 0.0f, int padded_vd = 0) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  HWY_ALIGN float p[kQ][kLanes];
  float alpha[kQ];
  VF scores[kQ][kVecs];
  // Several queries: ScoresTiled on AVX-512 (one query alone keeps its q in registers).
  constexpr bool kTiled = kTiledScores && kQ > 1;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (kTiled && kt == nullptr) ScoresTiled<kQ>(q, keys, padded_hd, scale, scores);
#endif
  for (int i = 0; i < kQ && !(kTiled && kt == nullptr); i += 2) {
    if (kt == nullptr) {
      for (int k = i; k < std::min(i + 2, kQ); ++k) {
        switch (padded_hd) {
          case 64: Scores<64>(q[k], keys, padded_hd, scale, scores[k]); break;
          case 128: Scores<128>(q[k], keys, padded_hd, scale, scores[k]); break;
          default: Scores<0>(q[k], keys, padded_hd, scale, scores[k]); break;
        }
      }
    } else if (i + 1 < kQ) {
      switch (padded_hd) {
        case 64: ScoresTransposed<2, 64>(q + i, kt, padded_hd, scale, scores + i); break;
        case 128: ScoresTransposed<2, 128>(q + i, kt, padded_hd, scale, scores + i); break;
        default: ScoresTransposed<2, 0>(q + i, kt, padded_hd, scale, scores + i); break;
      }
    } else {
      ScoresTransposed<1, 0>(q + i, kt, padded_hd, scale, scores + i);
    }
  }
  for (int i = 0; i < kQ; ++i) {
    VF* s = scores[i];
    if (softcap > 0.0f) SoftCap(softcap, s);
    VF chunk_max = hn::Set(d, kNegInf);
    for (int v = 0; v < kVecs; ++v) {
      const auto index = hn::Iota(di, v * static_cast<int>(kN));
      const auto visible =
          hn::And(hn::Lt(hn::Set(di, a - 1), index), hn::Lt(index, hn::Set(di, b)));
      s[v] = hn::IfThenElse(hn::RebindMask(d, visible), s[v], hn::Set(d, kNegInf));
      chunk_max = hn::Max(chunk_max, s[v]);
    }
    float* lsum = state[i] + padded_hd;
    float& m = state[i][padded_hd + kLanes];
    const float new_max = std::max(m, hn::GetLane(hn::MaxOfLanes(d, chunk_max)));
    alpha[i] = new_max == m ? 1.0f : ExpScalar(m - new_max);
    for (int v = 0; v < kVecs; ++v) {
      const VF pv = Exp(hn::Sub(s[v], hn::Set(d, new_max)));
      hn::Store(pv, d, p[i] + v * kN);
      const VF l = hn::LoadU(d, lsum + v * kN);
      hn::StoreU(alpha[i] == 1.0f ? hn::Add(l, pv) : Fma(l, hn::Set(d, alpha[i]), pv), d,
                 lsum + v * kN);
    }
    m = new_max;
  }
  constexpr int kBlockVecs = 4;  // value vectors per pass: 16 accumulators for 4 queries
  const int values_end = padded_vd > 0 ? padded_vd : padded_hd;
  int c = 0;
  for (; c + kBlockVecs * static_cast<int>(kN) <= values_end; c += kBlockVecs * kN) {
    AccumulateValues<kQ, kBlockVecs>(state, c, values, padded_hd, p, alpha, a, b);
  }
  for (; c < values_end; c += kN) {
    AccumulateValues<kQ, 1>(state, c, values, padded_hd, p, alpha, a, b);
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// AccumulateValues for kH kv heads of kG queries each, every head with its own value rows
// (values[h] + j * kDims): the heads' accumulators are independent chains, interleaved so that
// their FMA latencies overlap. alpha[i] multiplies unconditionally (x * 1 is x: the same bits
// as skipping it).
template <int kH, int kG, int kV, int kDims, bool kFull, typename Tick>
HWY_INLINE void AccumulateHeads(float* const* acc, int offset, const uint16_t* const* values,
                                const float (*p)[kLanes], const VF* alpha, int a, int b,
                                const Tick& tick) {
  const DF d;
  constexpr int kQ = kH * kG;
  VF sum[kQ][kV];
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kV; ++v) {
      sum[i][v] = hn::Mul(hn::LoadU(d, acc[i] + offset + v * kN), alpha[i]);
    }
  }
  const int j_begin = kFull ? 0 : a;
  const int j_end = kFull ? kChunk : b;
  for (int j = j_begin; j < j_end; ++j) {
    if (j % 4 == 0) tick();
    for (int h = 0; h < kH; ++h) {
      const uint16_t* row = values[h] + static_cast<int64_t>(j) * kDims + offset;
      VF value[kV];
      for (int v = 0; v < kV; ++v) value[v] = LoadKv(row + v * kN);
      for (int g = 0; g < kG; ++g) {
        const VF pj = hn::Set(d, p[h * kG + g][j]);
        for (int v = 0; v < kV; ++v) sum[h * kG + g][v] = Fma(pj, value[v], sum[h * kG + g][v]);
      }
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kV; ++v) hn::StoreU(sum[i][v], d, acc[i] + offset + v * kN);
  }
}

// UpdateChunks for one decode row over the F16 chunks of kH kv heads read in place (keys[h],
// values[h]: the head's 16 rows of kDims halves), kG queries per head (its GQA group: query
// h * kG + g reads head h), all seeing the chunk's keys [a, b). The same operations per query
// as UpdateChunks, so the same bits; but the heads' chains (scores, softmax, values) are
// independent and written side by side so that they overlap, and no step branches on the
// data (alpha == 1 is a select, its multiplies are exact). tick() runs before each head's
// scores and before every 4th value row of the first value pass (DecodeHeads spreads its
// prefetches over them).
template <int kH, int kG, int kDims, typename Tick>
HWY_INLINE void UpdateHeadsF16(const float* const* q, float* const* state,
                               const uint16_t* const* keys, const uint16_t* const* values,
                               float scale, int a, int b, float softcap, int padded_vd,
                               const Tick& tick) {
  static_assert(kVecs == 1, "one AVX-512 vector holds 16 lanes");
  constexpr int kQ = kH * kG;
  const DF d;
  const hn::RebindToSigned<DF> di;
  VF scores[kQ][kVecs];
  for (int h = 0; h < kH; ++h) {  // one query alone keeps its q and lane sums in registers
    tick();
    if constexpr (kG == 1) {
      Scores<kDims>(q[h], keys[h], kDims, scale, scores[h]);
    } else {
      ScoresTiled<kG, uint16_t, kDims, (kG == 4 && kDims == 64) ? 2 : 4>(q + h * kG, keys[h],
                                                                         kDims, scale,
                                                                         scores + h * kG);
    }
  }
  const auto index = hn::Iota(di, 0);
  const auto visible = hn::RebindMask(
      d, hn::And(hn::Lt(hn::Set(di, a - 1), index), hn::Lt(index, hn::Set(di, b))));
  HWY_ALIGN float p[kQ][kLanes];
  VF alpha[kQ];
  float new_max[kQ];
  for (int i = 0; i < kQ; ++i) {
    VF s = scores[i][0];
    if (softcap > 0.0f) SoftCap(softcap, &s);
    s = hn::IfThenElse(visible, s, hn::Set(d, kNegInf));
    const VF chunk_max = hn::Max(hn::Set(d, kNegInf), s);
    const float m = state[i][kDims + kLanes];
    new_max[i] = std::max(m, hn::GetLane(hn::MaxOfLanes(d, chunk_max)));
    alpha[i] = hn::IfThenElse(hn::Eq(hn::Set(d, new_max[i]), hn::Set(d, m)), hn::Set(d, 1.0f),
                              Exp(hn::Set(d, m - new_max[i])));
    scores[i][0] = s;
  }
  for (int i = 0; i < kQ; ++i) {
    const VF pv = Exp(hn::Sub(scores[i][0], hn::Set(d, new_max[i])));
    hn::Store(pv, d, p[i]);
    float* lsum = state[i] + kDims;
    hn::StoreU(Fma(hn::LoadU(d, lsum), alpha[i], pv), d, lsum);
    state[i][kDims + kLanes] = new_max[i];
  }
  const int values_end = padded_vd > 0 ? padded_vd : kDims;
  const bool full = a == 0 && b == kChunk;
  auto none = [] {};
  int c = 0;
  for (; c + 4 * static_cast<int>(kN) <= values_end; c += 4 * kN) {
    if (full && c == 0) {
      AccumulateHeads<kH, kG, 4, kDims, true>(state, c, values, p, alpha, a, b, tick);
    } else if (full) {
      AccumulateHeads<kH, kG, 4, kDims, true>(state, c, values, p, alpha, a, b, none);
    } else if (c == 0) {
      AccumulateHeads<kH, kG, 4, kDims, false>(state, c, values, p, alpha, a, b, tick);
    } else {
      AccumulateHeads<kH, kG, 4, kDims, false>(state, c, values, p, alpha, a, b, none);
    }
  }
  for (; c < values_end; c += kN) {
    AccumulateHeads<kH, kG, 1, kDims, false>(state, c, values, p, alpha, a, b, none);
  }
}
#endif

// total = the fold of total and part (attention.h): acc[0, padded_vd) and L (padded_vd: as
// in UpdateChunks, 0 = padded_hd). note: part saw at least one key.
HWY_INLINE void Merge(float* total, const float* part, int padded_hd, int padded_vd = 0) {
  const DF d;
  float& m_t = total[padded_hd + kLanes];
  const float m_k = part[padded_hd + kLanes];
  const float m = std::max(m_t, m_k);
  const VF a = hn::Set(d, ExpScalar(m_t - m));
  const VF b = hn::Set(d, ExpScalar(m_k - m));
  auto fold = [&](int c) HWY_ATTR {
    const VF t = hn::Mul(hn::LoadU(d, total + c), a);
    hn::StoreU(Fma(hn::LoadU(d, part + c), b, t), d, total + c);
  };
  for (int c = 0; c < (padded_vd > 0 ? padded_vd : padded_hd); c += kN) fold(c);  // acc
  for (int c = padded_hd; c < padded_hd + kLanes; c += kN) fold(c);             // L
  m_t = m;
}

HWY_INLINE void ResetStates(float* states, int count, int state_floats, int padded_hd) {
  for (int i = 0; i < count; ++i) {
    float* s = states + static_cast<int64_t>(i) * state_floats;
    std::fill(s, s + padded_hd + kLanes, 0.0f);
    s[padded_hd + kLanes] = kNegInf;
  }
}

// out[0, hd) = acc * (1 / the halving sum of L) (hd: the values written, <= padded_hd). With an attention sink s (gpt-oss; null:
// none), the sink joins the softmax denominator as one more term that carries no value:
//   m' = max(m, s); a = exp(m - m'); sum = fma(sum, a, exp(s - m')); out = acc * (a / sum).
HWY_INLINE void Finalize(const float* state, int hd, int padded_hd, float* out,
                         const float* sink = nullptr) {
  HWY_ALIGN float lanes[kLanes];
  std::memcpy(lanes, state + padded_hd, sizeof(lanes));
  float sum = TreeSum16(lanes);
  float a = 1.0f;
  if (sink != nullptr) {
    const float m = state[padded_hd + kLanes];
    const float top = std::max(m, *sink);
    a = AttentionExp(m - top);
    sum = std::fma(sum, a, AttentionExp(*sink - top));
  }
  const float inv = sink != nullptr ? a / sum : 1.0f / sum;
  for (int c = 0; c < hd; ++c) out[c] = state[c] * inv;
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
