// Per-target K/V conversion for attention (included by attention-inl.h once per Highway
// target): one kv head's keys of a 16-position chunk, read as stored in the head-major cache
// (tensor/kv_view.h), dequantized to f32 tile rows. Every conversion gives the values of
// tensor::DequantizeRow: exact widening, or the same single f32 multiply by the block scale
// (F16 NaN payloads aside: hardware widening quiets signalling NaNs).
// Tile row j (chunk position c0 + j) at dst + j * padded_hd; the padding stays untouched.

namespace kvserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
constexpr size_t kN = hn::MaxLanes(DF());
static_assert(16 % kN == 0, "16 logical lanes must be whole vectors");

// tensor::F16ToF32 without a call (the block scales of Q8_0): the 15 magnitude bits shifted
// into an f32 are the value times 2^-112, normals and subnormals alike; exponent 31 is inf/NaN.
HWY_INLINE float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = static_cast<uint32_t>(h & 0x7FFF) << 13;
  const uint32_t scaled = std::bit_cast<uint32_t>(std::bit_cast<float>(em) * 0x1p112f);
  return std::bit_cast<float>((em >= 0x0F800000u ? (em | 0x7F800000u) : scaled) | sign);
}

// tensor::E8M0ToF32 without libm: 2^(e - 127), 255 is NaN (e = 0: the subnormal 2^-127).
HWY_INLINE float E8M0ToFloat(uint8_t e) {
  const uint32_t bits = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : uint32_t{e} << 23;
  return std::bit_cast<float>(bits);
}

// tensor::E4M3ToF32 by the shift of the FP8 conversion below.
HWY_INLINE float E4M3ToFloat(uint8_t v) {
  const uint32_t mag = v & 0x7Fu;
  const float value = mag == 0x7F ? std::bit_cast<float>(0x7FC00000u)
                                  : std::bit_cast<float>(mag << 20) * 0x1p120f;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) | (uint32_t{v} & 0x80u) << 24);
}

// kN halves at src widened exactly. F16C / AVX-512 convert in hardware (only a signalling
// NaN's payload differs: it is quieted); elsewhere the shift of HalfToFloat, lane by lane
// (Highway's emulation mistakes infinities and NaNs for large numbers).
HWY_INLINE VF HalvesToFloats(const uint8_t* src) {
  const DF d;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src)));
#else
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const auto h = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d16, reinterpret_cast<const uint16_t*>(src))));
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(di, 0x8000)));
  const auto em = hn::ShiftLeft<13>(hn::And(h, hn::Set(di, 0x7FFF)));
  const auto scaled = hn::BitCast(di, hn::Mul(hn::BitCast(d, em), hn::Set(d, 0x1p112f)));
  const auto special = hn::Lt(hn::Set(di, 0x0F7FFFFF), em);
  const auto bits = hn::IfThenElse(special, hn::Or(em, hn::Set(di, 0x7F800000)), scaled);
  return hn::BitCast(d, hn::Or(bits, sign));
#endif
}

// hd values of one head slice at src (hd a multiple of BlockElems(t) and the slice starting on
// a block) into dst.
inline void ConvertHeadSlice(tensor::DType t, const uint8_t* src, int hd, float* dst) {
  const DF d;
  int i = 0;
  switch (t) {
    case tensor::DType::kF32:
      for (; i + static_cast<int>(kN) <= hd; i += kN) {
        hn::StoreU(hn::LoadU(d, reinterpret_cast<const float*>(src) + i), d, dst + i);
      }
      std::memcpy(dst + i, src + 4 * i, sizeof(float) * (hd - i));
      return;
    case tensor::DType::kF16: {
      for (; i + static_cast<int>(kN) <= hd; i += kN) hn::StoreU(HalvesToFloats(src + 2 * i), d, dst + i);
      for (; i < hd; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = tensor::F16ToF32(h);
      }
      return;
    }
    case tensor::DType::kBF16: {
      const hn::RebindToUnsigned<DF> du;
      const hn::Rebind<uint16_t, DF> d16;
      for (; i + static_cast<int>(kN) <= hd; i += kN) {
        const auto* h = reinterpret_cast<const uint16_t*>(src + 2 * i);
        const auto wide = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, h)));
        hn::StoreU(hn::BitCast(d, wide), d, dst + i);
      }
      for (; i < hd; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = tensor::BF16ToF32(h);
      }
      return;
    }
    case tensor::DType::kQ8_0: {
      const hn::RebindToSigned<DF> di;
      const hn::Rebind<int8_t, DF> d8;
      for (int b = 0; b < hd / 32; ++b, src += 34, dst += 32) {
        uint16_t scale_bits;
        std::memcpy(&scale_bits, src, 2);
        const VF scale = hn::Set(d, HalfToFloat(scale_bits));
        const auto* q = reinterpret_cast<const int8_t*>(src + 2);
        for (size_t j = 0; j < 32; j += kN) {
          const VF x = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + j)));
          hn::StoreU(hn::Mul(scale, x), d, dst + j);
        }
      }
      return;
    }
    case tensor::DType::kFP8_E4M3_E8M0_32: {
      // E4M3 -> f32: the 7 magnitude bits shifted into an f32 are the value times 2^-120
      // (normals and subnormals alike), so one exact multiply by 2^120 rescales; S.1111.111
      // is NaN. Example: 0x38 (1.0) -> bits 0x03800000 = 2^-120 -> 1.0.
      const hn::RebindToUnsigned<DF> du;
      const hn::Rebind<uint8_t, DF> d8;
      const auto nan_bits = hn::Set(du, 0x7FC00000u);
      for (int b = 0; b < hd / 32; ++b, src += 33, dst += 32) {
        const VF scale = hn::Set(d, E8M0ToFloat(src[0]));
        for (size_t j = 0; j < 32; j += kN) {
          const auto u = hn::PromoteTo(du, hn::LoadU(d8, src + 1 + j));
          const auto mag = hn::And(u, hn::Set(du, 0x7Fu));
          const VF value = hn::Mul(hn::BitCast(d, hn::ShiftLeft<20>(mag)), hn::Set(d, 0x1p120f));
          const auto is_nan = hn::RebindMask(d, hn::Eq(mag, hn::Set(du, 0x7Fu)));
          const auto bits = hn::Or(hn::BitCast(du, hn::IfThenElse(is_nan, hn::BitCast(d, nan_bits),
                                                                  value)),
                                   hn::ShiftLeft<24>(hn::And(u, hn::Set(du, 0x80u))));
          hn::StoreU(hn::Mul(scale, hn::BitCast(d, bits)), d, dst + j);
        }
      }
      return;
    }
    case tensor::DType::kFP4_E2M1_E4M3_16:
    case tensor::DType::kFP4_E2M1_E8M0_32: {
      static constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
      const bool e4m3 = t == tensor::DType::kFP4_E2M1_E4M3_16;
      const int elems = e4m3 ? 16 : 32;
      for (int b = 0; b < hd / elems; ++b, src += 1 + elems / 2, dst += elems) {
        const float s = e4m3 ? E4M3ToFloat(src[0]) : E8M0ToFloat(src[0]);
        for (int j = 0; j < elems / 2; ++j) {
          dst[2 * j] = s * kE2M1[src[1 + j] & 0x0F];
          dst[2 * j + 1] = s * kE2M1[src[1 + j] >> 4];
        }
      }
      return;
    }
    default:
      tensor::DequantizeRow(t, src, dst, hd);
      return;
  }
}

// n halves of K at k and of V at v (n a multiple of kN) widened exactly into
// k_dst / v_dst: one run of whole F16 rows, converted in one loop with K and V interleaved so
// that both streams' cache misses are in flight together. v_dst null: K only.
HWY_INLINE void ConvertHalvesKv(const uint8_t* k, const uint8_t* v, int64_t n, float* k_dst,
                                float* v_dst) {
  const DF d;
  int64_t i = 0;
  if (v_dst == nullptr) {
    for (; i < n; i += kN) hn::StoreU(HalvesToFloats(k + 2 * i), d, k_dst + i);
    return;
  }
  for (; i + 4 * static_cast<int64_t>(kN) <= n; i += 4 * kN) {
    for (int u = 0; u < 4; ++u) {
      hn::StoreU(HalvesToFloats(k + 2 * (i + u * kN)), d, k_dst + i + u * kN);
      hn::StoreU(HalvesToFloats(v + 2 * (i + u * kN)), d, v_dst + i + u * kN);
    }
  }
  for (; i < n; i += kN) {
    hn::StoreU(HalvesToFloats(k + 2 * i), d, k_dst + i);
    hn::StoreU(HalvesToFloats(v + 2 * i), d, v_dst + i);
  }
}

// K and V of kv head `head` at positions [lo, hi) of the chunk starting at c0 into tile rows
// keys / values + (j - c0) * padded_hd (values null: K only, for K and V stored as one row).
// A head that is a whole segment is converted directly; a head sharing its segment with others
// (head_dim not a whole number of quantization blocks) goes through DequantizeKvSlices and
// `staging`.
inline void ConvertChunk(const tensor::PagedKvView& kv, int layer,
                         std::span<const int32_t> block_table, int head, int hd, int padded_hd,
                         int32_t c0, int32_t lo, int32_t hi, float* keys, float* values,
                         float* staging) {
  const int64_t first = static_cast<int64_t>(head) * hd;
  const int segment = static_cast<int>(first / kv.segment_elems);
  const int64_t offset = first % kv.segment_elems;
  const bool whole = kv.segment_elems == hd;
  for (int32_t j = lo; j < hi;) {  // one run of consecutive slots of one block at a time
    const int32_t entry = j / kv.block_size;
    CHECK_LT(static_cast<size_t>(entry), block_table.size())
        << "block table does not cover position " << j;
    const int slot = j - entry * kv.block_size;
    const int32_t run = std::min<int32_t>(hi - j, kv.block_size - slot);
    const std::byte* k = kv.KSegment(layer, block_table[entry], slot, segment);
    const std::byte* v = kv.VSegment(layer, block_table[entry], slot, segment);
    if (whole && kv.dtype == tensor::DType::kF16 && padded_hd == hd) {  // rows back to back
      const int64_t at = static_cast<int64_t>(j - c0) * hd;
      ConvertHalvesKv(reinterpret_cast<const uint8_t*>(k), reinterpret_cast<const uint8_t*>(v),
                      int64_t{run} * hd, keys + at, values ? values + at : nullptr);
      j += run;
      continue;
    }
    for (int32_t r = 0; r < run; ++r, k += kv.segment_bytes, v += kv.segment_bytes) {
      float* k_row = keys + static_cast<int64_t>(j + r - c0) * padded_hd;
      float* v_row = values ? values + static_cast<int64_t>(j + r - c0) * padded_hd : nullptr;
      if (whole) {
        ConvertHeadSlice(kv.dtype, reinterpret_cast<const uint8_t*>(k), hd, k_row);
        if (values) ConvertHeadSlice(kv.dtype, reinterpret_cast<const uint8_t*>(v), hd, v_row);
      } else {
        DequantizeKvSlices(kv.dtype, &k, 1, offset, hd, k_row, padded_hd, staging);
        if (values) DequantizeKvSlices(kv.dtype, &v, 1, offset, hd, v_row, padded_hd, staging);
      }
    }
    j += run;
  }
}

// A software prefetch of the cache line at p that the compiler keeps: GCC 12 deletes a loop
// whose only statements are __builtin_prefetch (no side effect, so the loop is dead), which
// had left PrefetchChunk empty. kHint 0: into L1 (prefetcht0); 1: into L2 (prefetcht1; on AMD
// Zen 4 and later it stops in L2).
template <int kHint = 0>
HWY_INLINE void PrefetchLine(const char* p) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (kHint == 0) {
    asm volatile("prefetcht0 %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
#else
  __builtin_prefetch(p, 0, kHint == 0 ? 3 : 2);
#endif
}

// Prefetches kv head `head`'s K and V at positions [lo, hi): issued for the next chunk while
// the current one is computed. A head's keys of a block are one contiguous run.
inline void PrefetchChunk(const tensor::PagedKvView& kv, int layer,
                          std::span<const int32_t> block_table, int head, int hd, int32_t lo,
                          int32_t hi) {
  const int segment = static_cast<int>(int64_t{head} * hd / kv.segment_elems);
  for (int32_t j = lo; j < hi;) {
    const size_t entry = static_cast<size_t>(j / kv.block_size);
    if (entry >= block_table.size()) return;
    const int slot = j % kv.block_size;
    const int32_t run = std::min<int32_t>(hi - j, kv.block_size - slot);
    const auto* k = reinterpret_cast<const char*>(kv.KSegment(layer, block_table[entry], slot, segment));
    const auto* v = reinterpret_cast<const char*>(kv.VSegment(layer, block_table[entry], slot, segment));
    const size_t bytes = static_cast<size_t>(run) * kv.segment_bytes;
    for (size_t b = 0; b < bytes; b += 64) {
      PrefetchLine(k + b);
      if (v != k) PrefetchLine(v + b);
    }
    j += run;
  }
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
