#include "model/layers.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/weight_matrix.h"

namespace kvserve::model {

kernels::WeightMatrix BindMatrix(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr) << name;  // the architecture's config check found it
  Result<kernels::WeightMatrix> matrix = kernels::MatrixFromTensor(*info);
  CHECK(matrix.ok()) << matrix.status().ToString();
  return *matrix;
}

const float* BindVector(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr && info->dtype == tensor::DType::kF32) << name;
  return reinterpret_cast<const float*>(info->data);
}

void FlattenBatch(const Batch& batch, const BatchLimits& limits, TokenRows& rows) {
  rows.num_tokens = batch.NumTokens();
  CHECK_LE(rows.num_tokens, limits.max_batch_tokens) << "batch larger than max_batch_tokens";
  rows.tokens.resize(static_cast<size_t>(limits.max_batch_tokens));
  rows.positions.resize(static_cast<size_t>(limits.max_batch_tokens));
  rows.first_row.clear();
  int64_t row = 0;
  for (const SequenceInput& s : batch.sequences) {
    CHECK(!s.tokens.empty()) << "a sequence in a batch needs at least one token";
    CHECK(s.num_logits >= 0 && s.num_logits <= static_cast<int64_t>(s.tokens.size()))
        << "num_logits " << s.num_logits << " of " << s.tokens.size() << " tokens";
    CHECK_GE(s.start_pos, 0);
    const int64_t end_pos = s.start_pos + static_cast<int64_t>(s.tokens.size());
    CHECK_LE(end_pos, limits.max_context_tokens) << "sequence longer than max_context_tokens";
    CHECK_EQ(static_cast<int>(s.block_tables.size()), limits.num_groups)
        << "one block table per KV group";
    for (int g = 0; g < limits.num_groups; ++g) {
      CHECK_LE(end_pos, static_cast<int64_t>(s.block_tables[g].size()) * limits.block_size)
          << "the block table of group " << g << " does not cover the step's positions";
    }
    rows.first_row.push_back(row);
    for (size_t i = 0; i < s.tokens.size(); ++i, ++row) {
      CHECK(s.tokens[i] >= 0 && s.tokens[i] < limits.vocab_size) << "token " << s.tokens[i];
      rows.tokens[row] = s.tokens[i];
      rows.positions[row] = s.start_pos + static_cast<int32_t>(i);
    }
  }
}

void AttentionSequencesOf(const Batch& batch, const TokenRows& rows, int group,
                          std::vector<kernels::AttentionSequence>& out) {
  out.clear();
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& s = batch.sequences[i];
    out.push_back({rows.first_row[i], static_cast<int32_t>(s.tokens.size()), s.start_pos,
                   s.block_tables[group]});
  }
}

Activations::Activations(int64_t t, int64_t dim, int64_t ffn_dim, bool fused_gate_up)
    : x(t * dim),
      xb(t * dim),
      proj(t * dim),
      gate(t * ffn_dim),
      up(t * ffn_dim),
      gate_up(fused_gate_up ? t * 2 * ffn_dim : 0),
      last(t * dim) {}

void NormRows(const float* weight, const float* in, float* out, int64_t rows, int64_t dim,
              float eps, ThreadPool& pool) {
  pool.ParallelFor(rows, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t)
      kernels::RmsNorm(in + t * dim, weight, out + t * dim, dim, eps);
  });
}

void Embed(const kernels::WeightMatrix& table, const TokenRows& rows, float* x, ThreadPool& pool,
           float scale) {
  const int64_t dim = table.cols;
  pool.ParallelFor(rows.num_tokens, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::EmbeddingLookup(table.data, table.dtype, dim, rows.tokens[t], x + t * dim);
      if (scale != 1.0f) kernels::Scale(x + t * dim, dim, scale);
    }
  });
}

namespace {

const float* BindOptionalVector(const gguf::GgufFile& file, const std::string& name, bool bind) {
  return bind ? BindVector(file, name) : nullptr;
}

// rows x (cols) += bias (cols) for every row.
void AddBiasRows(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t t = 0; t < rows; ++t) kernels::AddInPlace(x + t * cols, bias, cols);
}

// Splits the fused (T, q_row + 2 kv_row) rows into q, k, v.
void SplitQkv(AttentionBuffers& buf, int64_t n, int64_t q_row, int64_t kv_row, ThreadPool& pool) {
  const int64_t row = q_row + 2 * kv_row;
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const float* src = buf.qkv.data() + t * row;
      std::copy_n(src, q_row, buf.q.data() + t * q_row);
      std::copy_n(src + q_row, kv_row, buf.k.data() + t * kv_row);
      std::copy_n(src + q_row + kv_row, kv_row, buf.v.data() + t * kv_row);
    }
  });
}

// Step 1 of AttentionBlock: q, k, v of every row from the normed input act.xb, with their
// biases, per-head norms and rotary embedding.
void ProjectQkv(const AttentionLayer& layer, const TokenRows& rows, Activations& act,
                AttentionBuffers& buf, kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const AttentionWeights& w = *layer.weights;
  const kernels::AttentionShape& shape = *layer.shape;
  const int64_t n = rows.num_tokens;
  const int64_t hd = shape.head_dim;
  const int64_t q_row = int64_t{shape.num_heads} * hd;
  const int64_t kv_row = int64_t{shape.num_kv_heads} * hd;
  if (w.qkv.data != nullptr) {
    kernels::MatMul(w.qkv, act.xb.data(), n, buf.qkv.data(), pool, scratch);
    SplitQkv(buf, n, q_row, kv_row, pool);
  } else {
    const kernels::MatMulOutput qkv[] = {{&w.q, buf.q.data()}, {&w.k, buf.k.data()},
                                         {&w.v, buf.v.data()}};
    kernels::MatMulMany(qkv, act.xb.data(), n, pool, scratch);
  }
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      float* q = buf.q.data() + t * q_row;
      float* k = buf.k.data() + t * kv_row;
      if (w.q_bias != nullptr) {
        AddBiasRows(q, w.q_bias, 1, q_row);
        AddBiasRows(k, w.k_bias, 1, kv_row);
        AddBiasRows(buf.v.data() + t * kv_row, w.v_bias, 1, kv_row);
      }
      if (w.q_norm != nullptr) {
        for (int h = 0; h < shape.num_heads; ++h) {
          kernels::RmsNorm(q + h * hd, w.q_norm, q + h * hd, hd, layer.eps);
        }
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          kernels::RmsNorm(k + h * hd, w.k_norm, k + h * hd, hd, layer.eps);
        }
      }
      const kernels::RopeParams& rope = *layer.rope;
      const float* angles = layer.rope_angles + t * rope.rope_dim;
      kernels::RopeWith(rope, angles, q, shape.num_heads);
      kernels::RopeWith(rope, angles, k, shape.num_kv_heads);
    }
  });
}

}  // namespace

void AddResidualRows(float* x, const float* proj, int64_t rows, int64_t dim, ThreadPool& pool) {
  constexpr size_t kResidualGrain = 16;
  pool.ParallelFor(
      static_cast<size_t>(rows),
      [&](size_t begin, size_t end, int) {
        kernels::AddInPlace(x + begin * dim, proj + begin * dim,
                            static_cast<int64_t>(end - begin) * dim);
      },
      kResidualGrain);
}

void RopeAnglesRows(const kernels::RopeParams& rope, const TokenRows& rows, float* table,
                    ThreadPool& pool) {
  pool.ParallelFor(rows.num_tokens, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::RopeAngles(rope, rows.positions[t], table + t * rope.rope_dim);
    }
  });
}

AttentionWeights BindAttention(const gguf::GgufFile& file, int layer, const ModelConfig& c) {
  const std::string p = fmt::format("blk.{}.", layer);
  AttentionWeights w;
  w.norm = BindVector(file, p + "attn_norm.weight");
  if (c.fused_qkv) {
    w.qkv = BindMatrix(file, p + "attn_qkv.weight");
  } else {
    w.q = BindMatrix(file, p + "attn_q.weight");
    w.k = BindMatrix(file, p + "attn_k.weight");
    w.v = BindMatrix(file, p + "attn_v.weight");
  }
  w.q_bias = BindOptionalVector(file, p + "attn_q.bias", c.qkv_bias);
  w.k_bias = BindOptionalVector(file, p + "attn_k.bias", c.qkv_bias);
  w.v_bias = BindOptionalVector(file, p + "attn_v.bias", c.qkv_bias);
  w.q_norm = BindOptionalVector(file, p + "attn_q_norm.weight", c.qk_norm);
  w.k_norm = BindOptionalVector(file, p + "attn_k_norm.weight", c.qk_norm);
  w.o = BindMatrix(file, p + "attn_output.weight");
  w.o_bias = BindOptionalVector(file, p + "attn_output.bias", c.output_bias);
  w.post_norm = BindOptionalVector(file, p + "post_attention_norm.weight", c.post_norms);
  return w;
}

AttentionBuffers::AttentionBuffers(int64_t t, int64_t q_row, int64_t kv_row, bool fused_qkv)
    : q(t * q_row),
      k(t * kv_row),
      v(t * kv_row),
      qkv(fused_qkv ? t * (q_row + 2 * kv_row) : 0),
      att(t * q_row) {}

void AttentionBlock(const AttentionLayer& layer, const TokenRows& rows,
                    std::span<const kernels::AttentionSequence> seqs, Activations& act,
                    AttentionBuffers& buf, kernels::AttentionScratch& attention_scratch,
                    kernels::MatMulScratch& matmul_scratch, ThreadPool& pool) {
  const AttentionWeights& w = *layer.weights;
  const int64_t n = rows.num_tokens;
  const int64_t dim = w.o.rows;
  CHECK(layer.rope_angles != nullptr) << "AttentionBlock needs the step's rope angles";
  // 1. Q, K, V of this step's tokens, roped at their positions.
  NormRows(w.norm, act.x.data(), act.xb.data(), n, dim, layer.eps, pool);
  ProjectQkv(layer, rows, act, buf, matmul_scratch, pool);
  // 2. Store K/V in the cache, then 3. attend reading everything back as stored.
  kernels::WriteKv(*layer.kv, layer.kv_layer, seqs, buf.k.data(), buf.v.data(), pool);
  kernels::PagedAttention(*layer.shape, *layer.kv, layer.kv_layer, seqs, buf.q.data(),
                          buf.att.data(), pool, attention_scratch);
  // 4. Output projection, its bias and post-norm, and the residual.
  kernels::MatMul(w.o, buf.att.data(), n, act.proj.data(), pool, matmul_scratch);
  if (w.o_bias != nullptr) AddBiasRows(act.proj.data(), w.o_bias, n, dim);
  if (w.post_norm != nullptr) {
    NormRows(w.post_norm, act.proj.data(), act.proj.data(), n, dim, layer.eps, pool);
  }
  AddResidualRows(act.x.data(), act.proj.data(), n, dim, pool);
}

FfnWeights BindFfn(const gguf::GgufFile& file, int layer) {
  const std::string p = fmt::format("blk.{}.", layer);
  FfnWeights w;
  w.norm = BindVector(file, p + "ffn_norm.weight");
  w.gate = BindMatrix(file, p + "ffn_gate.weight");
  w.up = BindMatrix(file, p + "ffn_up.weight");
  w.down = BindMatrix(file, p + "ffn_down.weight");
  return w;
}

FfnWeights BindFfn(const gguf::GgufFile& file, int layer, const ModelConfig& c) {
  const std::string p = fmt::format("blk.{}.", layer);
  FfnWeights w;
  w.norm = BindVector(file, p + "ffn_norm.weight");
  if (!c.fused_gate_up) w.gate = BindMatrix(file, p + "ffn_gate.weight");
  w.up = BindMatrix(file, p + "ffn_up.weight");
  w.down = BindMatrix(file, p + "ffn_down.weight");
  w.post_norm = BindOptionalVector(file, p + "post_ffw_norm.weight", c.post_norms);
  w.activation = c.activation;
  w.fused_gate_up = c.fused_gate_up;
  return w;
}

void GatedFfnBlock(const FfnWeights& w, float eps, int64_t n, Activations& act,
                   kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int64_t dim = w.down.rows;
  const int64_t ffn = w.down.cols;
  NormRows(w.norm, act.x.data(), act.xb.data(), n, dim, eps, pool);
  if (w.fused_gate_up) {
    kernels::MatMul(w.up, act.xb.data(), n, act.gate_up.data(), pool, scratch);
  } else {
    const kernels::MatMulOutput gate_up[] = {{&w.gate, act.gate.data()}, {&w.up, act.up.data()}};
    kernels::MatMulMany(gate_up, act.xb.data(), n, pool, scratch);
  }
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      float* gate = act.gate.data() + t * ffn;
      const float* up = act.up.data() + t * ffn;
      if (w.fused_gate_up) {  // row t of gate_up = gate (ffn) | up (ffn)
        std::copy_n(act.gate_up.data() + t * 2 * ffn, ffn, gate);
        up = act.gate_up.data() + t * 2 * ffn + ffn;
      }
      if (w.activation == FfnActivation::kGeluTanh) {
        kernels::GeluMul(gate, up, ffn);
      } else {
        kernels::SiluMul(gate, up, ffn);
      }
    }
  });
  kernels::MatMul(w.down, act.gate.data(), n, act.proj.data(), pool, scratch);
  if (w.post_norm != nullptr) {
    NormRows(w.post_norm, act.proj.data(), act.proj.data(), n, dim, eps, pool);
  }
  AddResidualRows(act.x.data(), act.proj.data(), n, dim, pool);
}

void Logits(const Batch& batch, const TokenRows& rows, const float* norm, float eps,
            const kernels::WeightMatrix& output, Activations& act, kernels::MatMulScratch& scratch,
            ThreadPool& pool, float* logits, std::optional<float> softcap) {
  const int64_t dim = output.cols;
  int64_t num_rows = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& s = batch.sequences[i];
    const int64_t first = rows.first_row[i] + static_cast<int64_t>(s.tokens.size()) - s.num_logits;
    std::copy_n(act.x.data() + first * dim, s.num_logits * dim, act.last.data() + num_rows * dim);
    num_rows += s.num_logits;
  }
  if (num_rows == 0) return;
  CHECK(logits != nullptr);
  NormRows(norm, act.last.data(), act.last.data(), num_rows, dim, eps, pool);
  kernels::MatMul(output, act.last.data(), num_rows, logits, pool, scratch);
  if (!softcap) return;
  const int64_t vocab = output.rows;
  pool.ParallelFor(num_rows, [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) kernels::SoftCap(logits + r * vocab, vocab, *softcap);
  });
}

}  // namespace kvserve::model
