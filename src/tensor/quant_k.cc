// K-format quantizers: ggml's quantize_row_{q2,q3,q4,q5,q6}_K_ref, which llama.cpp's quantize
// runs when no imatrix is given. Each helper below is one of ggml's (make_qx_quants,
// make_q3_quants, make_qkx2_quants), with its f32 expressions in the same order.
// Layouts in tensor/quant_ints.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace kvserve::tensor::internal {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

// The value of largest magnitude with its sign (first on ties), and that magnitude.
void SignedMax(int n, const float* x, float* max, float* amax) {
  *max = 0.0f;
  *amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > *amax) {
      *amax = ax;
      *max = x[i];
    }
  }
}

int ClampInt(int v, int lo, int hi) {
  return std::max(lo, std::min(hi, v));
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights (w = x^2): L gets codes in
// [0, 2 nmax); returns the scale.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max, amax;
  SignedMax(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = ClampInt(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(ClampInt(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + ClampInt(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's make_q3_quants with do_rmse: codes in [0, 2 nmax); returns the scale.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  float max, amax;
  SignedMax(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = ClampInt(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        const int new_l = ClampInt(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float nl = static_cast<float>(new_l);
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml's make_qkx2_quants: codes in [0, nmax] for x ~ scale * L - the_min; returns the scale
// and sets *the_min (>= 0).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, float rmin, float rdelta, int nstep, bool use_mad) {
  uint8_t laux[32];
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  const float fmax = static_cast<float>(nmax);
  float iscale = fmax / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(ClampInt(NearestInt(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fmax) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = ClampInt(NearestInt(iscale * (x[i] - min)), 0, nmax);
      laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Two-bit codes L[256] packed as Q2_K / Q3_K store them (quant_ints.h): 4 per byte.
void PackTwoBits(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
                                            L[j + l + 96] << 6);
    }
  }
}

// get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 packed bytes.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// Q4_K / Q5_K (nmax 15 or 31): the shared part of quantize_row_q{4,5}_K_ref up to the final
// codes L[256]. y points at the block (d, dmin, scales[12]).
void QuantizeQ45KCodes(const float* x, uint8_t* y, int nmax, float rmin, int nstep, uint8_t* L) {
  float mins[8], scales[8], weights[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f,
                               nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t* sc = y + 4;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] = static_cast<uint8_t>(sc[j - 4] | ((ls >> 4) << 6));
      sc[j] = static_cast<uint8_t>(sc[j] | ((lm >> 4) << 6));
    }
  }
  StoreF16(y, max_scale / 63.0f);
  StoreF16(y + 2, max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ScaleMinK4(j, sc, &s, &m);
    const float d = LoadF16(y) * static_cast<float>(s);
    if (d == 0.0f) continue;
    const float dm = LoadF16(y + 2) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] =
          static_cast<uint8_t>(ClampInt(NearestInt((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void QuantizeQ2K(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 84) {
    uint8_t L[256];
    float mins[16], scales[16], weights[16];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f,
                                 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    uint8_t* sc = y;
    if (max_scale > 0.0f) {
      const float iscale = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      StoreF16(y + 80, max_scale / 15.0f);
    } else {
      std::memset(sc, 0, 16);
      StoreF16(y + 80, 0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = 15.0f / max_min;
      for (int j = 0; j < 16; ++j) {
        sc[j] = static_cast<uint8_t>(sc[j] | (NearestInt(iscale * mins[j]) << 4));
      }
      StoreF16(y + 82, max_min / 15.0f);
    } else {
      StoreF16(y + 82, 0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = LoadF16(y + 80) * static_cast<float>(sc[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = LoadF16(y + 82) * static_cast<float>(sc[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] =
            static_cast<uint8_t>(ClampInt(NearestInt((x[16 * j + ii] + dm) / d), 0, 3));
      }
    }
    PackTwoBits(L, y + 16);
  }
}

void QuantizeQ3K(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 110) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    uint8_t* sc = y + 96;
    std::memset(sc, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
        l = ClampInt(l, -32, 31) + 32;
        if (j < 8) {
          sc[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        sc[j % 4 + 8] = static_cast<uint8_t>(sc[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      StoreF16(y + 108, 1.0f / iscale);
    } else {
      StoreF16(y + 108, 0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
      const int s = static_cast<int8_t>((low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
      const float d = LoadF16(y + 108) * static_cast<float>(s);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(ClampInt(NearestInt(x[16 * j + ii] / d), -4, 3) + 4);
      }
    }
    uint8_t* hmask = y;
    std::memset(hmask, 0, 32);
    uint8_t codes[256];
    for (int j = 0; j < 256; ++j) {
      int l = L[j];
      if (l > 3) {
        hmask[j % 32] = static_cast<uint8_t>(hmask[j % 32] | (1 << (j / 32)));
        l -= 4;
      }
      codes[j] = static_cast<uint8_t>(l);
    }
    PackTwoBits(codes, y + 32);
  }
}

void QuantizeQ4K(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 144) {
    uint8_t L[256];
    QuantizeQ45KCodes(x, y, 15, -1.0f, 20, L);
    uint8_t* q = y + 16;
    for (int j = 0; j < 256; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5K(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 176) {
    uint8_t L[256];
    QuantizeQ45KCodes(x, y, 31, -0.5f, 15, L);
    uint8_t* qh = y + 16;
    uint8_t* ql = y + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < 256; j += 64, ql += 32) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[j + l], l2 = L[j + l + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[l] = static_cast<uint8_t>(qh[l] | m1);
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[l] = static_cast<uint8_t>(qh[l] | m2);
        }
        ql[l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void QuantizeQ6K(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 210) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(y, 0, 210);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    StoreF16(y + 208, 1.0f / iscale);
    auto* sc = reinterpret_cast<int8_t*>(y + 192);
    for (int ib = 0; ib < 16; ++ib) {
      sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < 16; ++j) {
      const float d = LoadF16(y + 208) * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] =
            static_cast<int8_t>(ClampInt(NearestInt(x[16 * j + ii] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace kvserve::tensor::internal
