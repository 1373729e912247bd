#include "model/moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/ops.h"
#include "tensor/dtype.h"

namespace kvserve::model {
namespace {

std::string LayerName(int layer, std::string_view suffix) {
  return fmt::format("blk.{}.{}", layer, suffix);
}

Status CheckTensor(const gguf::GgufFile& file, const std::string& name, std::vector<int64_t> dims) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return InvalidArgument(fmt::format("tensor '{}' is missing", name));
  if (t->dims != dims) {
    return InvalidArgument(fmt::format("tensor '{}' has dims [{}], expected [{}]", name,
                                       fmt::join(t->dims, ", "), fmt::join(dims, ", ")));
  }
  if (!t->dtype) {
    return InvalidArgument(
        fmt::format("tensor '{}' has ggml type {}, which kvserve cannot use", name, t->ggml_type));
  }
  if (dims.size() >= 2 && !tensor::IsValidRowLength(*t->dtype, dims[0])) {
    return InvalidArgument(fmt::format("tensor '{}': rows of {} values cannot be {}", name, dims[0],
                                       tensor::DTypeName(*t->dtype)));
  }
  if (dims.size() == 1 && *t->dtype != tensor::DType::kF32) {
    return InvalidArgument(fmt::format("tensor '{}' must be f32", name));
  }
  return Status::Ok();
}

// CheckTensor, and the tensor must be F32 whatever its rank (bias arrays).
Status CheckF32(const gguf::GgufFile& file, const std::string& name, std::vector<int64_t> dims) {
  KV_RETURN_IF_ERROR(CheckTensor(file, name, dims));
  if (*file.FindTensor(name)->dtype != tensor::DType::kF32) {
    return InvalidArgument(fmt::format("tensor '{}' must be f32", name));
  }
  return Status::Ok();
}

}  // namespace

std::vector<kernels::WeightMatrix> BindExperts(const gguf::GgufFile& file,
                                               const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr && info->dtype && info->dims.size() == 3) << name;
  const int64_t cols = info->dims[0], rows = info->dims[1];
  const int64_t bytes = tensor::RowBytes(*info->dtype, cols) * rows;
  std::vector<kernels::WeightMatrix> out;
  for (int64_t e = 0; e < info->dims[2]; ++e) {
    out.push_back(
        {static_cast<const std::byte*>(info->data) + e * bytes, *info->dtype, rows, cols});
  }
  return out;
}

MoeWeights BindMoe(const gguf::GgufFile& file, const MoeConfig& c, int layer) {
  MoeWeights w;
  w.norm = BindVector(file, LayerName(layer, c.norm_tensor + ".weight"));
  w.router = BindMatrix(file, LayerName(layer, "ffn_gate_inp.weight"));
  if (c.selection_bias) w.selection_bias = BindVector(file, LayerName(layer, "exp_probs_b.bias"));
  if (c.biases) {
    w.router_bias = BindVector(file, LayerName(layer, "ffn_gate_inp.bias"));
    w.gate_bias = BindVector(file, LayerName(layer, "ffn_gate_exps.bias"));
    w.up_bias = BindVector(file, LayerName(layer, "ffn_up_exps.bias"));
    w.down_bias = BindVector(file, LayerName(layer, "ffn_down_exps.bias"));
  }
  w.gate = BindExperts(file, LayerName(layer, "ffn_gate_exps.weight"));
  w.up = BindExperts(file, LayerName(layer, "ffn_up_exps.weight"));
  w.down = BindExperts(file, LayerName(layer, "ffn_down_exps.weight"));
  if (c.shared_ffn_dim > 0) {
    w.shared_gate_up[0] = BindMatrix(file, LayerName(layer, "ffn_gate_shexp.weight"));
    w.shared_gate_up[1] = BindMatrix(file, LayerName(layer, "ffn_up_shexp.weight"));
    w.shared_down = BindMatrix(file, LayerName(layer, "ffn_down_shexp.weight"));
    if (c.shared_gate) {  // one row of dim values, {dim} or {dim, 1}
      const gguf::TensorInfo* t = file.FindTensor(LayerName(layer, "ffn_gate_inp_shexp.weight"));
      CHECK(t != nullptr && t->dtype);
      w.shared_gate = {static_cast<const std::byte*>(t->data), *t->dtype, 1, t->dims[0]};
    }
  }
  return w;
}

Status CheckMoeTensors(const gguf::GgufFile& file, const MoeConfig& c, int64_t dim, int layer) {
  const int64_t e = c.num_experts, f = c.expert_ffn_dim, s = c.shared_ffn_dim;
  KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, c.norm_tensor + ".weight"), {dim}));
  const std::string router = LayerName(layer, "ffn_gate_inp.weight");
  KV_RETURN_IF_ERROR(CheckTensor(file, router, {dim, e}));
  const tensor::DType router_type = *file.FindTensor(router)->dtype;
  if (router_type != tensor::DType::kF32 && router_type != tensor::DType::kF16 &&
      router_type != tensor::DType::kBF16) {
    return InvalidArgument(fmt::format("tensor '{}' (the router) must be f32, f16 or bf16, not {}",
                                       router, tensor::DTypeName(router_type)));
  }
  if (c.selection_bias) {
    KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "exp_probs_b.bias"), {e}));
  }
  KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_gate_exps.weight"), {dim, f, e}));
  KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_up_exps.weight"), {dim, f, e}));
  KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_down_exps.weight"), {f, dim, e}));
  if (c.biases) {  // F32, 2-D ones included (CheckF32)
    KV_RETURN_IF_ERROR(CheckF32(file, LayerName(layer, "ffn_gate_inp.bias"), {e}));
    KV_RETURN_IF_ERROR(CheckF32(file, LayerName(layer, "ffn_gate_exps.bias"), {f, e}));
    KV_RETURN_IF_ERROR(CheckF32(file, LayerName(layer, "ffn_up_exps.bias"), {f, e}));
    KV_RETURN_IF_ERROR(CheckF32(file, LayerName(layer, "ffn_down_exps.bias"), {dim, e}));
  }
  if (s > 0) {
    KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_gate_shexp.weight"), {dim, s}));
    KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_up_shexp.weight"), {dim, s}));
    KV_RETURN_IF_ERROR(CheckTensor(file, LayerName(layer, "ffn_down_shexp.weight"), {s, dim}));
    if (c.shared_gate) {  // llama.cpp declares it {dim}; {dim, 1} is the same row
      const std::string gate = LayerName(layer, "ffn_gate_inp_shexp.weight");
      const gguf::TensorInfo* t = file.FindTensor(gate);
      const bool one_d = t != nullptr && t->dims.size() == 1;
      KV_RETURN_IF_ERROR(CheckTensor(
          file, gate, one_d ? std::vector<int64_t>{dim} : std::vector<int64_t>{dim, 1}));
    }
  }
  return Status::Ok();
}

Result<MoeConfig> ReadMoeConfig(const gguf::GgufFile& file, const std::string& arch,
                                std::optional<int64_t> fallback_ffn) {
  MoeConfig c;
  auto count = [&](const std::string& key, int64_t fallback) -> Result<int64_t> {
    Result<int64_t> v =
        fallback >= 0 ? file.GetIntOr(arch + "." + key, fallback) : file.GetInt(arch + "." + key);
    if (!v.ok()) {
      return InvalidArgument(fmt::format("model metadata lacks required key '{}.{}'", arch, key));
    }
    if (*v < 0 || *v > (int64_t{1} << 30)) {
      return InvalidArgument(fmt::format("'{}.{}' is out of range: {}", arch, key, *v));
    }
    return *v;
  };
  KV_ASSIGN_OR_RETURN(c.num_experts, count("expert_count", -1));
  KV_ASSIGN_OR_RETURN(c.top_k, count("expert_used_count", -1));
  const int64_t fallback = fallback_ffn && c.top_k > 0 ? *fallback_ffn / c.top_k : -1;
  KV_ASSIGN_OR_RETURN(c.expert_ffn_dim, count("expert_feed_forward_length", fallback));
  if (c.num_experts < 1 || c.top_k < 1 || c.top_k > c.num_experts || c.expert_ffn_dim < 1) {
    return InvalidArgument(fmt::format(
        "{}: expert_used_count {} must be in [1, expert_count {}] and the expert FFN positive",
        arch, c.top_k, c.num_experts));
  }
  KV_ASSIGN_OR_RETURN(int64_t shared_count, count("expert_shared_count", 0));
  KV_ASSIGN_OR_RETURN(c.shared_ffn_dim,
                      count("expert_shared_feed_forward_length", shared_count * c.expert_ffn_dim));
  KV_ASSIGN_OR_RETURN(int64_t gating, count("expert_gating_func", 1));
  if (gating != 1 && gating != 2) {
    return InvalidArgument(
        fmt::format("{}.expert_gating_func {} is not softmax (1) or sigmoid (2)", arch, gating));
  }
  c.gating = static_cast<ExpertGating>(gating);
  KV_ASSIGN_OR_RETURN(c.norm_topk, file.GetBoolOr(arch + ".expert_weights_norm", false));
  KV_ASSIGN_OR_RETURN(double scale, file.GetFloatOr(arch + ".expert_weights_scale", 0.0));
  c.weights_scale = static_cast<float>(scale);
  return c;
}

MoeBuffers::MoeBuffers(int64_t t, int64_t dim, const MoeConfig& c)
    : logits(t * c.num_experts),
      chosen(t * c.top_k),
      weights(t * c.top_k),
      offsets(c.num_experts + 1),
      order(t * c.top_k),
      slot(t * c.top_k),
      cursor(c.num_experts),
      claim(c.num_experts),
      in(t * c.top_k * dim),
      gate(t * c.top_k * c.expert_ffn_dim),
      up(t * c.top_k * c.expert_ffn_dim),
      out(t * c.top_k * dim),
      shared_gate(t),
      shared_g(t * c.shared_ffn_dim),
      shared_u(t * c.shared_ffn_dim),
      shared_out(c.shared_ffn_dim > 0 ? t * dim : 0),
      xq(t, dim),
      gathered(t, dim),
      dim(dim),
      lane_cols(std::max({dim, c.expert_ffn_dim, c.shared_ffn_dim})) {}

void RouteToken(const MoeConfig& c, const float* selection_bias, const float* logits,
                int32_t* chosen, float* weights) {
  const int64_t e_count = c.num_experts;
  // Per-thread scratch sized to the expert count (any count: a file's expert_count is only
  // bounded by its tensors), reused across tokens.
  thread_local std::vector<float> probs_buf, select_buf;
  thread_local std::vector<int32_t> idx_buf;
  if (std::ssize(probs_buf) < e_count) {
    probs_buf.resize(static_cast<size_t>(e_count));
    select_buf.resize(static_cast<size_t>(e_count));
    idx_buf.resize(static_cast<size_t>(e_count));
  }
  float* probs = probs_buf.data();
  float* select = select_buf.data();
  int32_t* idx = idx_buf.data();
  if (c.gating == ExpertGating::kSoftmaxWeight) {
    std::copy_n(logits, e_count, probs);
  } else if (c.gating == ExpertGating::kSoftmax) {
    float max_value = logits[0];
    for (int64_t e = 1; e < e_count; ++e) max_value = std::max(max_value, logits[e]);
    double sum = 0;
    for (int64_t e = 0; e < e_count; ++e) {
      probs[e] = std::exp(logits[e] - max_value);
      sum += probs[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < e_count; ++e) probs[e] *= inv;
  } else {
    for (int64_t e = 0; e < e_count; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int64_t e = 0; e < e_count; ++e) {
    select[e] = selection_bias != nullptr ? probs[e] + selection_bias[e] : probs[e];
  }
  std::iota(idx, idx + e_count, 0);
  std::partial_sort(idx, idx + c.top_k, idx + e_count, [&](int32_t a, int32_t b) {
    return select[a] > select[b] || (select[a] == select[b] && a < b);
  });
  float sum = 0.0f;
  for (int64_t k = 0; k < c.top_k; ++k) {
    chosen[k] = idx[k];
    weights[k] = probs[idx[k]];
    sum += weights[k];
  }
  if (c.gating == ExpertGating::kSoftmaxWeight) {  // softmax over the k chosen logits
    const float top = *std::max_element(weights, weights + c.top_k);
    float total = 0.0f;
    for (int64_t k = 0; k < c.top_k; ++k) {
      weights[k] = std::exp(weights[k] - top);
      total += weights[k];
    }
    const float inv = 1.0f / total;
    for (int64_t k = 0; k < c.top_k; ++k) weights[k] *= inv;
  }
  if (c.norm_topk) {
    sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp (the smallest normal f16)
    for (int64_t k = 0; k < c.top_k; ++k) weights[k] /= sum;
  }
  if (c.weights_scale != 0.0f) {
    for (int64_t k = 0; k < c.top_k; ++k) weights[k] *= c.weights_scale;
  }
}

namespace {

// Sorts the n * top_k (token, k) rows by expert (stable: token order within an expert).
// buf.offsets[e] .. offsets[e + 1] are expert e's sorted rows (RunExpert gathers their inputs).
void GroupByExpert(const MoeConfig& c, int64_t n, MoeBuffers& buf) {
  const int64_t k_count = c.top_k;
  std::fill(buf.offsets.begin(), buf.offsets.end(), 0);
  for (int64_t i = 0; i < n * k_count; ++i) ++buf.offsets[buf.chosen[i] + 1];
  for (int64_t e = 0; e < c.num_experts; ++e) buf.offsets[e + 1] += buf.offsets[e];
  std::copy(buf.offsets.begin(), buf.offsets.end() - 1, buf.cursor.begin());
  for (int64_t i = 0; i < n * k_count; ++i) {
    const int32_t r = buf.cursor[buf.chosen[i]]++;
    buf.order[r] = static_cast<int32_t>(i);
    buf.slot[i] = r;
  }
}

// One expert's gate and up biases (ffn values each; null: none). Its down bias is added in
// MoeFfnBlock's weighted combine.
struct ExpertBiases {
  const float* gate = nullptr;
  const float* up = nullptr;
};

void AddBias(const float* bias, float* rows_data, int64_t rows, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) kernels::AddInPlace(rows_data + r * n, bias, n);
}

// The expert's input rows: float (quantized by the matmul, once for gate and up), or quantized
// already (MoeBuffers::xq, gathered).
struct ExpertInput {
  const float* x = nullptr;
  const kernels::QuantizedRows* q = nullptr;
};

void ExpertFfn(const kernels::WeightMatrix& gate, const kernels::WeightMatrix& up,
               const kernels::WeightMatrix& down, const ExpertBiases& bias,
               ExpertActivation activation, const ExpertInput& in, int64_t rows, float* g,
               float* u, float* out, kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int64_t ffn = gate.rows;
  const kernels::MatMulOutput gate_up[] = {{&gate, g}, {&up, u}};
  // each matrix's last rows prefetch the next one's first
  if (in.q != nullptr) {
    kernels::MatMulManyQuantized(gate_up, *in.q, rows, pool, scratch, down.data);
  } else {
    kernels::MatMulMany(gate_up, in.x, rows, pool, scratch, down.data);
  }
  pool.ParallelFor(rows, [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) {
      if (activation == ExpertActivation::kSwigluOai) {  // the biases added in the same pass
        kernels::SwigluOaiMul(g + r * ffn, u + r * ffn, ffn, bias.gate, bias.up);
      } else {
        AddBias(bias.gate, g + r * ffn, 1, ffn);
        AddBias(bias.up, u + r * ffn, 1, ffn);
        kernels::SiluMul(g + r * ffn, u + r * ffn, ffn);
      }
    }
  });
  kernels::MatMul(down, g, rows, out, pool, scratch);
}

// Expert e over its sorted rows: their inputs gathered, as quantized rows from buf.xq into
// `gathered` when the expert's gate and up take them (buf.x_block > 0), as float rows of xb
// into buf.in otherwise; the outputs (before the down bias) in buf.out at the same rows, its
// gate / up rows at the same positions of buf.gate / buf.up (ffn values each), so experts may
// run at once.
void RunExpert(const MoeWeights& w, const MoeConfig& c, int64_t e, const float* xb,
               MoeBuffers& buf, MoeBuffers::QuantRows& gathered,
               kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int64_t first = buf.offsets[e], rows = buf.offsets[e + 1] - first;
  if (rows == 0) return;
  const int64_t dim = buf.dim, ffn = c.expert_ffn_dim;
  ExpertInput in;
  kernels::QuantizedRows q;
  if (buf.x_block > 0 && kernels::MatMulTakesQuantizedRows(w.gate[e], rows) &&
      kernels::MatMulTakesQuantizedRows(w.up[e], rows)) {
    const int64_t blocks = dim / buf.x_block, sums = dim / 16;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = buf.order[first + r] / c.top_k;
      std::copy_n(buf.xq.q.data() + t * dim, dim, gathered.q.data() + r * dim);
      std::copy_n(buf.xq.d.data() + t * blocks, blocks, gathered.d.data() + r * blocks);
      std::copy_n(buf.xq.sums.data() + t * sums, sums, gathered.sums.data() + r * sums);
    }
    q = {gathered.q.data(), gathered.d.data(), gathered.sums.data(), dim, buf.x_block};
    in.q = &q;
  } else {
    for (int64_t r = first; r < first + rows; ++r) {
      std::copy_n(xb + buf.order[r] / c.top_k * dim, dim, buf.in.data() + r * dim);
    }
    in.x = buf.in.data() + first * dim;
  }
  ExpertBiases bias;
  if (c.biases) {
    bias = {w.gate_bias + e * ffn, w.up_bias + e * ffn};
  }
  ExpertFfn(w.gate[e], w.up[e], w.down[e], bias, c.activation, in, rows,
            buf.gate.data() + first * ffn, buf.up.data() + first * ffn,
            buf.out.data() + first * dim, scratch, pool);
}

// The shared experts (when the layer has them) over the n rows of xb (buf.xq when their gate
// and up take those): buf.shared_out, and their gate's logits in buf.shared_gate.
void RunShared(const MoeWeights& w, const MoeConfig& c, int64_t n, const float* xb,
               MoeBuffers& buf, kernels::MatMulScratch& scratch, ThreadPool& pool) {
  if (c.shared_ffn_dim == 0) return;
  ExpertInput in{xb, nullptr};
  const kernels::QuantizedRows q{buf.xq.q.data(), buf.xq.d.data(), buf.xq.sums.data(), buf.dim,
                                 buf.x_block};
  const kernels::WeightMatrix* gate_up = w.shared_gate_up;
  if (buf.x_block > 0 &&
      kernels::MatMulActivationBlock(gate_up[0].dtype) == buf.x_block &&
      kernels::MatMulActivationBlock(gate_up[1].dtype) == buf.x_block &&
      kernels::MatMulTakesQuantizedRows(gate_up[0], n) &&
      kernels::MatMulTakesQuantizedRows(gate_up[1], n)) {
    in = {nullptr, &q};
  }
  ExpertFfn(gate_up[0], gate_up[1], w.shared_down, {}, c.activation, in, n, buf.shared_g.data(),
            buf.shared_u.data(), buf.shared_out.data(), scratch, pool);
  if (c.shared_gate) kernels::MatMul(w.shared_gate, xb, n, buf.shared_gate.data(), pool, scratch);
}

// Every active expert of a step of n tokens (grouped by GroupByExpert), and the shared experts.
// A few-token step with enough active experts gives each expert to one thread whole (the
// shared experts first, then the routed ones by rows, most first, claimed by the pool's range
// indices, each with its own scratch and a serial pool): no barrier per matmul, and no expert's
// 1-3 rows split into tiny ranges. Otherwise each expert in turn, its rows split over the pool.
// Either way every row's value is the matmul's function of its input alone
// (kernels/cpu/matmul.h), so the bits do not depend on the path or the thread count.
void RunExperts(const MoeWeights& w, const MoeConfig& c, int64_t n, const float* xb,
                MoeBuffers& buf, kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int threads = pool.num_threads();
  int64_t active = 0;
  for (int64_t e = 0; e < c.num_experts; ++e) active += buf.offsets[e + 1] > buf.offsets[e];
  if (threads == 1 || n > kWholeExpertMaxTokens || active < kWholeExpertsPerThread * threads) {
    for (int64_t e = 0; e < c.num_experts; ++e) {
      RunExpert(w, c, e, xb, buf, buf.gathered, scratch, pool);
    }
    RunShared(w, c, n, xb, buf, scratch, pool);
    return;
  }
  while (std::ssize(buf.lanes) < threads) {
    buf.lanes.push_back(
        std::make_unique<MoeBuffers::Lane>(kWholeExpertMaxTokens, buf.lane_cols, buf.dim));
  }
  // Claim order: the active experts by rows, most first (ties by index), so that a thread's
  // last expert is among the shortest and the threads finish close together.
  int64_t num_active = 0;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    if (buf.offsets[e + 1] > buf.offsets[e]) buf.claim[num_active++] = static_cast<int32_t>(e);
  }
  auto rows = [&buf](int32_t e) { return buf.offsets[e + 1] - buf.offsets[e]; };
  std::stable_sort(buf.claim.begin(), buf.claim.begin() + num_active,
                   [&](int32_t a, int32_t b) { return rows(a) > rows(b); });
  const int64_t shared = c.shared_ffn_dim > 0 ? 1 : 0;  // unit 0 when there are shared experts
  std::atomic<int64_t> next{0};
  pool.ParallelFor(static_cast<size_t>(threads), [&](size_t, size_t, int lane) {
    MoeBuffers::Lane& l = *buf.lanes[lane];
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < shared + num_active;) {
      if (i < shared) {
        RunShared(w, c, n, xb, buf, l.scratch, l.serial);
      } else {
        RunExpert(w, c, buf.claim[i - shared], xb, buf, l.gathered, l.scratch, l.serial);
      }
    }
  });
}

// Fewer rows than this are quantized on the calling thread (a pool call costs more).
constexpr int64_t kParallelQuantizeRows = 8;

// buf.xq = xb's n rows quantized for the experts' gate and up (buf.x_block their activation
// block), or buf.x_block = 0 when those read float rows or quantize them differently.
void QuantizeExpertInputs(const MoeWeights& w, int64_t n, const float* xb, MoeBuffers& buf,
                          ThreadPool& pool) {
  const tensor::DType dtype = w.gate[0].dtype;
  const int64_t block = kernels::MatMulActivationBlock(dtype);
  buf.x_block = block > 0 && kernels::MatMulActivationBlock(w.up[0].dtype) == block ? block : 0;
  if (buf.x_block == 0) return;
  const int64_t dim = buf.dim;
  auto rows = [&](size_t begin, size_t end, int) {
    const auto b = static_cast<int64_t>(begin);
    kernels::QuantizeRowsForMatMul(dtype, xb + b * dim, static_cast<int64_t>(end) - b, dim,
                                   buf.xq.q.data() + b * dim, buf.xq.d.data() + b * (dim / block),
                                   buf.xq.sums.data() + b * (dim / 16));
  };
  if (n < kParallelQuantizeRows) {
    rows(0, static_cast<size_t>(n), 0);
  } else {
    pool.ParallelFor(static_cast<size_t>(n), rows);
  }
}

}  // namespace

void MoeFfnBlock(const MoeWeights& w, const MoeConfig& c, float eps, int64_t n, Activations& act,
                 MoeBuffers& buf, kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int64_t dim = w.router.cols;
  const int64_t k_count = c.top_k;
  NormRows(w.norm, act.x.data(), act.xb.data(), n, dim, eps, pool);
  // 1. Route every token.
  kernels::MatMul(w.router, act.xb.data(), n, buf.logits.data(), pool, scratch);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      AddBias(w.router_bias, buf.logits.data() + t * c.num_experts, 1, c.num_experts);
      RouteToken(c, w.selection_bias, buf.logits.data() + t * c.num_experts,
                 buf.chosen.data() + t * k_count, buf.weights.data() + t * k_count);
    }
  });
  // 2. Each active expert once over all of its rows, and the shared experts; the rows
  // quantized once here when the experts take quantized rows, not once per expert of a token.
  GroupByExpert(c, n, buf);
  QuantizeExpertInputs(w, n, act.xb.data(), buf, pool);
  RunExperts(w, c, n, act.xb.data(), buf, scratch, pool);
  // 3. y = sum_k w_k * expert_k(n), k in order, then + the shared experts (* sigmoid(their
  // gate) when they have one), in act.proj; then the residual x += y, row by row while hot.
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      float* y = act.proj.data() + t * dim;
      for (int64_t k = 0; k < k_count; ++k) {
        const float wk = buf.weights[t * k_count + k];
        const float* o = buf.out.data() + static_cast<int64_t>(buf.slot[t * k_count + k]) * dim;
        const float* down_bias =  // (expert output + its down bias) * w_k
            c.biases ? w.down_bias + static_cast<int64_t>(buf.chosen[t * k_count + k]) * dim
                     : nullptr;
        kernels::AddScaledRow(y, o, down_bias, wk, dim, /*accumulate=*/k > 0);
      }
      if (c.shared_ffn_dim > 0) {
        const float* s = buf.shared_out.data() + t * dim;
        if (c.shared_gate) {
          const float g = 1.0f / (1.0f + std::exp(-buf.shared_gate[t]));
          kernels::AddScaledRow(y, s, nullptr, g, dim, /*accumulate=*/true);
        } else {
          kernels::AddInPlace(y, s, dim);
        }
      }
      kernels::AddInPlace(act.x.data() + t * dim, y, dim);
    }
  });
}

}  // namespace kvserve::model
