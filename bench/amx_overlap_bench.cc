// How the parts of one block of the 16-token Q8_0 AMX pipeline (AmxRowsQ8_0x16 in
// src/kernels/cpu/matmul_x86_amx16-inl.h: 16 weight rows x 32 values x 16 tokens) share one
// core, measured apart and together, all from L1 (no memory traffic): whether a part's time
// hides behind the others' or adds to them.
//
// BM_AmxBlockParts<parts>: 4096 blocks per iteration, each running the parts whose bits are set:
//   1   the f32 chain: 16 rows x (int32 -> f32, d_w * d_x, fma), C read from memory (the C
//       tile stored two blocks earlier, as in the pipeline)
//   2   the tile loads: A 16 rows x 32 bytes at a Q8_0 block's values (rows 1088 bytes apart:
//       1024 columns; about half the rows cross a cache line) and B 8 rows x 64 bytes
//   4   tdpbssd into one of four C tiles (rotating, as the pipeline does)
//   8   the drain: tilestored of a C tile (1 KiB) and tilezero
//   16  with 1: the chain reads a C that no tile store writes
//   32  with 2: A from 64-byte aligned row offsets (no line crossings)
// Counter seconds_per_block (CPU time). If the parts ran side by side, 15 would take about the
// longest part's time; the sum of the parts' times says they run one after the other.
// Skips where the CPU or OS offers no AMX int8 tiles.
#include <benchmark/benchmark.h>

// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*) when they are inlined into
// functions with a target attribute in a file compiled without -mavx512f.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul_portable.h"

namespace kvserve {
namespace {

#define KVSERVE_BENCH_AMX \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq")))

constexpr int kBlocks = 4096;
constexpr int64_t kRowBytes = 1088;

struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// C tiles 0-3 16 x 64 bytes, A tiles 4-5 16 x 32 bytes, B tiles 6-7 8 x 64 bytes (the Q8_0
// path's AmxConfigure32).
KVSERVE_BENCH_AMX void Configure() {
  alignas(64) TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = t < 6 ? 16 : 8;
    cfg.colsb[t] = t < 4 || t >= 6 ? 64 : 32;
  }
  asm volatile("" : : "r"(&cfg) : "memory");  // the config's bytes are read by ldtilecfg
  _tile_loadconfig(&cfg);
}

struct Acc {
  __m512 v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15;
};

#define KVSERVE_FINISH_ROW(k)                                                           \
  acc.v##k = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[k]), dx),                   \
                             _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * (k))), acc.v##k);

KVSERVE_BENCH_AMX inline void Finish(const int32_t* c, const float* dw, __m512 dx, Acc& acc) {
  KVSERVE_FINISH_ROW(0) KVSERVE_FINISH_ROW(1) KVSERVE_FINISH_ROW(2) KVSERVE_FINISH_ROW(3)
  KVSERVE_FINISH_ROW(4) KVSERVE_FINISH_ROW(5) KVSERVE_FINISH_ROW(6) KVSERVE_FINISH_ROW(7)
  KVSERVE_FINISH_ROW(8) KVSERVE_FINISH_ROW(9) KVSERVE_FINISH_ROW(10) KVSERVE_FINISH_ROW(11)
  KVSERVE_FINISH_ROW(12) KVSERVE_FINISH_ROW(13) KVSERVE_FINISH_ROW(14) KVSERVE_FINISH_ROW(15)
}

// Block b's parts; kSet = b % 4 picks the C tile (and A / B by parity), as in the pipeline.
template <int kParts, int kSet>
KVSERVE_BENCH_AMX inline void Block(const uint8_t* a, const int8_t* b, int32_t (*c)[256],
                                    const float* dw, __m512 dx, Acc& acc) {
  if constexpr ((kParts & 2) != 0) {
    if constexpr (kSet % 2 == 0) {
      _tile_loadd(4, a, kRowBytes);
      _tile_loadd(6, b, 64);
    } else {
      _tile_loadd(5, a, kRowBytes);
      _tile_loadd(7, b, 64);
    }
  }
  if constexpr ((kParts & 4) != 0) {
    if constexpr (kSet == 0) _tile_dpbssd(0, 4, 6);
    if constexpr (kSet == 1) _tile_dpbssd(1, 5, 7);
    if constexpr (kSet == 2) _tile_dpbssd(2, 4, 6);
    if constexpr (kSet == 3) _tile_dpbssd(3, 5, 7);
  }
  if constexpr ((kParts & 8) != 0) {  // the C tile of two blocks back
    constexpr int kDrain = (kSet + 2) % 4;
    if constexpr (kDrain == 0) _tile_stored(0, c[kDrain], 64);
    if constexpr (kDrain == 1) _tile_stored(1, c[kDrain], 64);
    if constexpr (kDrain == 2) _tile_stored(2, c[kDrain], 64);
    if constexpr (kDrain == 3) _tile_stored(3, c[kDrain], 64);
    if constexpr (kDrain == 0) _tile_zero(0);
    if constexpr (kDrain == 1) _tile_zero(1);
    if constexpr (kDrain == 2) _tile_zero(2);
    if constexpr (kDrain == 3) _tile_zero(3);
  }
  if constexpr ((kParts & 1) != 0) {
    Finish((kParts & 16) != 0 ? c[4 + kSet] : c[(kSet + 1) % 4], dw, dx, acc);
  }
}

template <int kParts>
KVSERVE_BENCH_AMX __attribute__((noinline)) float Run(const uint8_t* rows, const int8_t* b,
                                                      const float* dw, const float* dx) {
  alignas(64) int32_t c[8][256] = {};
  const __m512 zero = _mm512_setzero_ps();
  Acc acc{zero, zero, zero, zero, zero, zero, zero, zero,
          zero, zero, zero, zero, zero, zero, zero, zero};
  for (int s = 0; s < kBlocks; s += 4) {
    // 16 blocks of one 16-row tile of 1024 columns cycle through L1-resident bytes.
    const int at = s % 32;
    const __m512 x = _mm512_loadu_ps(dx + 16 * (s % 8));
    // (32: A from 64-byte aligned rows instead, as a layout without the f16 scales would give)
    const int64_t step = (kParts & 32) != 0 ? 64 : 34, skip = (kParts & 32) != 0 ? 0 : 2;
    const uint8_t* a = rows + step * (at / 2) * 2 + skip;
    Block<kParts, 0>(a, b, c, dw, x, acc);
    Block<kParts, 1>(a + step, b + 512, c, dw + 16, x, acc);
    Block<kParts, 2>(a + 2 * step, b + 1024, c, dw + 32, x, acc);
    Block<kParts, 3>(a + 3 * step, b + 1536, c, dw + 48, x, acc);
  }
  const __m512 sum = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc.v0, acc.v1), _mm512_add_ps(acc.v2, acc.v3)),
      _mm512_add_ps(_mm512_add_ps(acc.v4, acc.v5), _mm512_add_ps(acc.v6, acc.v7)));
  const __m512 sum2 = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc.v8, acc.v9), _mm512_add_ps(acc.v10, acc.v11)),
      _mm512_add_ps(_mm512_add_ps(acc.v12, acc.v13), _mm512_add_ps(acc.v14, acc.v15)));
  return _mm512_reduce_add_ps(_mm512_add_ps(sum, sum2));
}

template <int kParts>
KVSERVE_BENCH_AMX void BM_AmxBlockParts(benchmark::State& state) {
  if (!kernels::internal::AmxUsable()) {
    state.SkipWithError("this CPU or OS offers no AMX int8 tiles");
    return;
  }
  std::vector<uint8_t> rows(static_cast<size_t>(16 * kRowBytes + 2048), 1);
  std::vector<int8_t> b(2048, 1);
  std::vector<float> dw(64, 0.5f), dx(128, 0.25f);
  Configure();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (auto _ : state) {
    benchmark::DoNotOptimize(Run<kParts>(rows.data(), b.data(), dw.data(), dx.data()));
  }
  _tile_release();
  state.counters["seconds_per_block"] = benchmark::Counter(
      kBlocks, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

BENCHMARK_TEMPLATE(BM_AmxBlockParts, 1);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 2);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 4);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 8);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 3);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 9);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 25);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 34);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 38);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 47);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 5);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 6);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 14);
BENCHMARK_TEMPLATE(BM_AmxBlockParts, 15);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
