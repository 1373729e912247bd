// MatMul entry point: activation quantization, thread split and Highway dispatch.
// Also compile the AVX3_DL target (Ice Lake / Zen 4 and later), whose quantized tiles use
// AVX512-VNNI. Must precede every Highway include in this file.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/matmul-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/check.h"
#include "kernels/cpu/matmul_portable.h"

namespace kvserve::kernels {

HWY_EXPORT(MatMulRows);
HWY_EXPORT(MatMulTarget);
HWY_EXPORT(QuantizeRow);
HWY_EXPORT(QuantizeRowQ8K);
HWY_EXPORT(TokenGroupMinTokens);
HWY_EXPORT(FillGroups);

namespace {

// Row chunks are multiples of this (every target's row tile divides it).
constexpr int64_t kRowGrain = 16;
// Row chunks per thread for dynamic claiming.
constexpr int64_t kChunksPerThread = 8;
// Below this many tokens the calling thread quantizes the activations alone.
constexpr int64_t kParallelQuantizeTokens = 8;
// Batches of at least this many tokens use the AMX tiles where AmxUsable(): 16, and fewer for
// Q4_K and Q6_K, whose one-group pipelines (kernels/cpu/matmul_x86_amx16k-inl.h, amx16q6-inl.h)
// beat the few-token VNNI rows from there (measured with BM_ExpertStream, weights from memory:
// Q4_K at 10 tokens 112 vs 134 ms for 1024 x 1024, even for 256 x 1024; Q6_K at 10 tokens 86 vs
// 134 and 108 vs 139, at 8 even; docs/PERFORMANCE.md).
int64_t AmxMinTokens(tensor::DType t) {
  if (t == tensor::DType::kQ4_K || t == tensor::DType::kQ6_K) return 10;
  return 16;
}
// AMX batches of fewer tokens than this claim several row tiles at a time (RunRows).
constexpr int64_t kAmxClaimTokens = 256;

std::atomic<bool> amx_disabled_for_test{false};

// CPUID leaf 7 EDX: AMX-TILE (bit 24) and AMX-INT8 (bit 25); then Linux's permission for the
// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18), process-wide.
bool MachineHasAmx() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  const char* env = std::getenv("KVSERVE_MATMUL_AMX");
  return env == nullptr || std::strcmp(env, "0") != 0;
#else
  return false;
#endif
}

// Everything a ParallelFor body needs, passed by one pointer so std::function stays in its
// small-object buffer (no allocation per call).
struct MatMulArgs {
  const WeightMatrix* w;
  const float* x;
  int64_t n;
  float* y;
  int8_t* qx;
  float* dx;
  int16_t* sums;
  uint8_t* staging;              // token groups, or nullptr when the target reads none
  internal::TokenGroups groups;
  float* dx_groups = nullptr;    // QuantActivations::d_groups, or nullptr
  int8_t* qx_groups = nullptr;   // QuantActivations::q_groups, or nullptr
  bool amx = false;              // QuantActivations::amx
  bool sums_needed = true;       // the 32-value formats' code sums (QuantizeActivations)
  int64_t chunk = 0;             // rows per claim
  std::atomic<int64_t> next{0};  // first unclaimed row
};

// What PrepareActivations left in a scratch: the activations of x for weights with `cols`
// columns and activation block `block`, with or without code sums and token groups.
struct Prepared {
  const float* x = nullptr;
  int64_t n = 0, cols = 0, block = 0;
  bool sums = false, staging = false, amx = false;
};

// One activation row for activation block `block` (32 or 256): q[cols], d[cols / block] and,
// for 256 or when sums_needed, the codes summed per 16 in sums[cols / 16].
void QuantizeActivationRowFor(int64_t block, const float* x, int64_t cols, int8_t* q, float* d,
                              int16_t* sums, bool sums_needed) {
  if (block == 256) {
    QuantizeActivationRowQ8K(x, cols, q, d, sums);
  } else {
    HWY_DYNAMIC_DISPATCH(QuantizeRow)(x, cols, q, d);
    if (sums_needed) internal::SumActivationCodes(q, cols, sums);
  }
}

// Quantizes activation rows [begin, end) for weights of a's format (scheme of matmul.h).
void QuantizeActivations(const MatMulArgs& a, size_t begin, size_t end) {
  const int64_t cols = a.w->cols;
  const int64_t block = internal::ActivationBlock(a.w->dtype);
  for (size_t t = begin; t < end; ++t) {
    int8_t* q = a.qx + t * cols;
    float* d = a.dx + t * (cols / block);
    QuantizeActivationRowFor(block, a.x + t * cols, cols, q, d, a.sums + t * (cols / 16),
                             a.sums_needed);
    if (block == 32 && a.dx_groups != nullptr) {
      float* g = a.dx_groups + (t / 16) * (cols / 32) * 16 + t % 16;
      int8_t* gq = a.qx_groups + (t / 16) * 16 * cols + (t % 16) * 32;
      for (int64_t b = 0; b < cols / 32; ++b) {
        g[16 * b] = d[b];
        std::memcpy(gq + 512 * b, q + 32 * b, 32);
      }
    }
  }
}

// std::clamp(std::round(v), -127, 127) without the libm call, so the loop vectorizes: t is v
// truncated toward zero (exact below 2^31; v is at most ~127 here); |v - t| is the exact
// fractional part, and a half or more rounds away from zero. Example: -2.5 -> t = -2,
// |-0.5| >= 0.5 -> -3, as std::round. NaN (from a NaN activation) gives 0.
inline float RoundHalfAwayClamp127(float v) {
  const float c = v == v ? std::min(std::max(v, -127.0f), 127.0f) : 0.0f;
  const float t = static_cast<float>(static_cast<int32_t>(c));
  const float away = std::fabs(c - t) >= 0.5f ? (c < 0.0f ? -1.0f : 1.0f) : 0.0f;
  return t + away;
}

}  // namespace

MatMulScratch::MatMulScratch(int64_t max_tokens, int64_t max_cols)
    : max_tokens_(max_tokens),
      max_cols_(max_cols),
      qx_(static_cast<size_t>(max_tokens * max_cols)),
      dx_(static_cast<size_t>(max_tokens * ((max_cols + 31) / 32))),
      sums_(static_cast<size_t>(max_tokens * ((max_cols + 15) / 16))),
      staging_(static_cast<size_t>(internal::TokenGroups::BytesFor(max_tokens, max_cols))),
      qx_groups_(static_cast<size_t>((max_tokens + 15) / 16 * 16 * max_cols)),
      dx_groups_(static_cast<size_t>((max_tokens + 15) / 16 * 16 * ((max_cols + 31) / 32))) {
  CHECK_GE(max_tokens, 1);
  CHECK_GE(max_cols, 1);
}

namespace internal {

thread_local GemvLookahead gemv_lookahead;

bool AmxUsable() {
  static const bool machine = MachineHasAmx();
  return machine && !amx_disabled_for_test.load(std::memory_order_relaxed);
}

void SetAmxForTest(bool enabled) {
  amx_disabled_for_test.store(!enabled, std::memory_order_relaxed);
}

void QuantizeActivationRowPortable(const float* x, int64_t cols, int8_t* q, float* d) {
  CHECK_EQ(cols % 32, 0);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    // max over 8 lanes, then over the lanes: the same value as a sequential max (NaN is
    // skipped either way), in a form the compiler vectorizes.
    float lanes[8] = {};
    for (int i = 0; i < 32; i += 8) {
      for (int l = 0; l < 8; ++l) lanes[l] = std::max(lanes[l], std::fabs(xb[i + l]));
    }
    float amax = 0.0f;
    for (float l : lanes) amax = std::max(amax, l);
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    for (int i = 0; i < 32; ++i) q[32 * b + i] = static_cast<int8_t>(RoundHalfAwayClamp127(xb[i] * inv));
  }
}

}  // namespace internal

void QuantizeActivationRow(const float* x, int64_t cols, int8_t* q, float* d) {
  CHECK_EQ(cols % 32, 0);
  HWY_DYNAMIC_DISPATCH(QuantizeRow)(x, cols, q, d);
}

void QuantizeActivationRowQ8K(const float* x, int64_t cols, int8_t* q, float* d, int16_t* sums) {
  CHECK_EQ(cols % 256, 0);
  HWY_DYNAMIC_DISPATCH(QuantizeRowQ8K)(x, cols, q, d, sums);
}

namespace {

// What the rows of n tokens of w's integer format read besides the quantized rows.
struct ActivationPlan {
  int64_t block = 0;
  bool amx = false;
  // The AMX tiles of the 32-value formats read the quantized rows in place, and the code sums
  // only for a min term; every other token-group tile reads the interleaved copy.
  bool amx32 = false;
  bool sums_needed = true;
  // The token groups (the AMX tiles of the K formats and Q8_0 read them, from fewer tokens too).
  bool staging = false;
};

ActivationPlan PlanActivations(const WeightMatrix& w, int64_t n) {
  ActivationPlan p;
  const int64_t min_tokens = HWY_DYNAMIC_DISPATCH(TokenGroupMinTokens)(w.dtype);
  p.block = internal::ActivationBlock(w.dtype);
  p.amx = min_tokens > 0 && n >= AmxMinTokens(w.dtype) && internal::AmxUsable();
  p.amx32 = p.amx && p.block == 32 && !internal::AmxQ8WeightsAsA(w.dtype, n);
  p.sums_needed = !p.amx32 || w.dtype == tensor::DType::kQ4_1 || w.dtype == tensor::DType::kQ5_1;
  p.staging = min_tokens > 0 && (n >= min_tokens || p.amx) && !p.amx32;
  return p;
}

// args' activation fields from the plan, pointing at the scratch's buffers its tiles read.
void ApplyPlan(const ActivationPlan& plan, MatMulArgs& args, MatMulScratch& scratch) {
  args.amx = plan.amx;
  args.sums_needed = plan.sums_needed;
  if (plan.staging) {
    args.staging = scratch.staging();
    args.groups = {args.w->cols, plan.block, (args.n + 15) / 16};
  }
  if (plan.amx32) {
    args.dx_groups = scratch.dx_groups();
    args.qx_groups = scratch.qx_groups();
  }
}

// The token groups of args' quantized rows into the scratch's staging (args.staging, .groups).
void FillTokenGroups(MatMulArgs& args, ThreadPool& pool) {
  pool.ParallelFor(static_cast<size_t>(args.groups.num_groups),
                   [a = &args](size_t begin, size_t end, int) {
                     HWY_DYNAMIC_DISPATCH(FillGroups)({a->qx, a->dx, a->sums}, a->groups, a->n,
                                                      static_cast<int64_t>(begin),
                                                      static_cast<int64_t>(end), a->staging);
                   });
}

// Quantizes x for w's format into the scratch (and its token groups where the target reads
// them), unless `done` already holds exactly that; fills args' activation fields.
void PrepareActivations(MatMulArgs& args, ThreadPool& pool, MatMulScratch& scratch,
                        Prepared& done) {
  const WeightMatrix& w = *args.w;
  const int64_t n = args.n;
  const ActivationPlan plan = PlanActivations(w, n);
  const int64_t block = plan.block;
  ApplyPlan(plan, args, scratch);
  if (done.x == args.x && done.n == n && done.cols == w.cols && done.block == block &&
      (done.sums || !args.sums_needed) && done.staging == plan.staging && done.amx == args.amx) {
    return;
  }
  if (plan.amx32 && n % 16 != 0) {  // the last group's missing tokens
    float* last = args.dx_groups + n / 16 * (w.cols / 32) * 16;
    int8_t* last_q = args.qx_groups + n / 16 * 16 * w.cols;
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      std::fill(last + 16 * b + n % 16, last + 16 * (b + 1), 0.0f);
      std::fill(last_q + 512 * b + 32 * (n % 16), last_q + 512 * (b + 1), int8_t{0});
    }
  }
  if (n < kParallelQuantizeTokens) {
    QuantizeActivations(args, 0, static_cast<size_t>(n));
  } else {
    pool.ParallelFor(static_cast<size_t>(n), [a = &args](size_t begin, size_t end, int) {
      QuantizeActivations(*a, begin, end);
    });
  }
  if (plan.staging) FillTokenGroups(args, pool);
  done = {args.x, n, w.cols, block, args.sums_needed || block == 256, plan.staging, args.amx};
}

// The rows of y = x W^T from prepared activations; then: MatMul's.
void RunRows(MatMulArgs& args, ThreadPool& pool, const void* then) {
  // Rows are claimed in chunks (about 8 per thread) rather than split once: a thread that
  // is descheduled or slower costs the others a chunk, not half the matrix. Every y[t, r] is
  // computed the same way whichever thread claims its row.
  const int64_t threads = pool.num_threads();
  const WeightMatrix& w = *args.w;
  // AMX batches claim one row tile at a time from kAmxClaimTokens tokens on: a tile of all n
  // tokens is long enough (about 20 us for 512 tokens and 768 columns) that the claims cost
  // nothing, and the threads finish within one tile of each other. Shorter batches (a 16-token
  // decode step: about 1 us a tile) claim tiles for about kAmxClaimTokens tokens at a time, so
  // that each claim's tile setup is not paid per 16 rows (measured: 13% of a 32000 x 768 Q6_K
  // matmul of 16 tokens).
  const int64_t spread = std::max<int64_t>(
      kRowGrain, (w.rows + threads * kChunksPerThread - 1) / (threads * kChunksPerThread) /
                     kRowGrain * kRowGrain);
  // One thread (a whole expert's matmul in MoeFfnBlock's lanes) takes all rows in one claim.
  args.chunk =
      threads == 1 ? w.rows
      : args.amx   ? std::min(spread, kRowGrain * std::max<int64_t>(1, kAmxClaimTokens / args.n))
                   : spread;
  // One thread claims all rows at once (above), so its last tile is the matrix's: point its
  // lookahead at `then`.
  if (threads == 1 && then != nullptr) {
    internal::gemv_lookahead = {
        static_cast<const uint8_t*>(w.data) + w.rows * tensor::RowBytes(w.dtype, w.cols), then};
  }
  pool.ParallelFor(static_cast<size_t>(threads), [a = &args](size_t, size_t, int) {
    const int64_t rows = a->w->rows;
    const internal::QuantActivations act{a->qx,  a->dx,        a->sums,     a->staging,
                                         a->amx, a->dx_groups, a->qx_groups};
    for (int64_t begin; (begin = a->next.fetch_add(a->chunk, std::memory_order_relaxed)) < rows;) {
      HWY_DYNAMIC_DISPATCH(MatMulRows)
      (*a->w, a->x, act, a->n, a->y, begin, std::min(begin + a->chunk, rows));
    }
  });
  internal::gemv_lookahead = {};
}

void CheckMatMul(const WeightMatrix& w, int64_t n, const MatMulScratch& scratch) {
  CHECK(MatMulSupports(w.dtype)) << "MatMul cannot read " << tensor::DTypeName(w.dtype);
  CHECK_LE(n, scratch.max_tokens());
  CHECK_LE(w.cols, scratch.max_cols());
  CHECK(tensor::IsValidRowLength(w.dtype, w.cols)) << "bad row length " << w.cols;
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool,
            MatMulScratch& scratch, const void* then) {
  const MatMulOutput out{&w, y};
  MatMulMany({&out, 1}, x, n, pool, scratch, then);
}

void MatMulMany(std::span<const MatMulOutput> outputs, const float* x, int64_t n,
                ThreadPool& pool, MatMulScratch& scratch, const void* then) {
  Prepared done;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const WeightMatrix& w = *outputs[i].w;
    if (n == 0 || w.rows == 0) continue;
    CheckMatMul(w, n, scratch);
    MatMulArgs args{&w, x, n, outputs[i].y, scratch.qx(), scratch.dx(), scratch.sums(), nullptr, {}};
    if (tensor::IsIntegerQuant(w.dtype)) PrepareActivations(args, pool, scratch, done);
    RunRows(args, pool, i + 1 < outputs.size() ? outputs[i + 1].w->data : then);
  }
}

int64_t MatMulActivationBlock(tensor::DType dtype) {
  return tensor::IsIntegerQuant(dtype) ? internal::ActivationBlock(dtype) : 0;
}

void QuantizeRowsForMatMul(tensor::DType dtype, const float* x, int64_t n, int64_t cols,
                           int8_t* q, float* d, int16_t* sums) {
  const int64_t block = MatMulActivationBlock(dtype);
  CHECK_GT(block, 0) << tensor::DTypeName(dtype) << " reads float activations";
  CHECK_EQ(cols % block, 0);
  for (int64_t t = 0; t < n; ++t) {  // as QuantizeActivations, with the code sums always
    QuantizeActivationRowFor(block, x + t * cols, cols, q + t * cols, d + t * (cols / block),
                             sums + t * (cols / 16), /*sums_needed=*/true);
  }
}

bool MatMulTakesQuantizedRows(const WeightMatrix& w, int64_t n) {
  if (!tensor::IsIntegerQuant(w.dtype)) return false;
  // Only AMX tiles refuse them: without AMX, no plan to make (a batched step asks per expert).
  return !internal::AmxUsable() || !PlanActivations(w, n).amx32;
}

void MatMulManyQuantized(std::span<const MatMulOutput> outputs, const QuantizedRows& x, int64_t n,
                         ThreadPool& pool, MatMulScratch& scratch, const void* then) {
  bool groups_filled = false;  // every output has x's columns and block: one set of groups
  for (size_t i = 0; i < outputs.size(); ++i) {
    const WeightMatrix& w = *outputs[i].w;
    if (n == 0 || w.rows == 0) continue;
    CheckMatMul(w, n, scratch);
    CHECK_GT(x.block, 0);
    CHECK_EQ(MatMulActivationBlock(w.dtype), x.block) << tensor::DTypeName(w.dtype);
    CHECK_EQ(w.cols, x.cols);
    const ActivationPlan plan = PlanActivations(w, n);
    CHECK(!plan.amx32) << tensor::DTypeName(w.dtype) << " x " << n << " quantizes for AMX itself";
    // The kernels read the rows only (QuantActivations is const there).
    MatMulArgs args{&w, nullptr, n, outputs[i].y, const_cast<int8_t*>(x.q),
                    const_cast<float*>(x.d), const_cast<int16_t*>(x.sums), nullptr, {}};
    ApplyPlan(plan, args, scratch);
    if (plan.staging && !groups_filled) {
      FillTokenGroups(args, pool);
      groups_filled = true;
    }
    RunRows(args, pool, i + 1 < outputs.size() ? outputs[i + 1].w->data : then);
  }
}

void MatMulPortable(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  if (n == 0 || w.rows == 0) return;
  if (!tensor::IsIntegerQuant(w.dtype)) {
    internal::PortableRows(w, x, {}, n, y, 0, w.rows);
    return;
  }
  const int64_t cols = w.cols;
  const int64_t block = internal::ActivationBlock(w.dtype);
  std::vector<int8_t> q(static_cast<size_t>(n * cols));
  std::vector<float> d(static_cast<size_t>(n * (cols / block)));
  std::vector<int16_t> sums(static_cast<size_t>(n * (cols / 16)));
  for (int64_t t = 0; t < n; ++t) {
    if (block == 256) {
      internal::QuantizeActivationRowQ8KPortable(x + t * cols, cols, q.data() + t * cols,
                                                 d.data() + t * (cols / 256),
                                                 sums.data() + t * (cols / 16));
    } else {
      internal::QuantizeActivationRowPortable(x + t * cols, cols, q.data() + t * cols,
                                              d.data() + t * (cols / 32));
      internal::SumActivationCodes(q.data() + t * cols, cols, sums.data() + t * (cols / 16));
    }
  }
  internal::PortableRows(w, x, {q.data(), d.data(), sums.data()}, n, y, 0, w.rows);
}

std::span<const tensor::DType> MatMulTypes() {
  using tensor::DType;
  static constexpr DType kTypes[] = {
      DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,   DType::kQ4_1,
      DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,
      DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};
  return kTypes;
}

bool MatMulSupports(tensor::DType t) {
  for (tensor::DType s : MatMulTypes()) {
    if (s == t) return true;
  }
  return false;
}

std::string_view MatMulTargetName() {
  const std::string_view target = HWY_DYNAMIC_DISPATCH(MatMulTarget)();
  // The AVX3_DL kernels run integer batches on AMX tiles where the machine has them.
  if (target == "AVX3_DL" && internal::AmxUsable()) return "AVX3_DL+AMX";
  return target;
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
