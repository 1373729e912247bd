#include "model/layers.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace kvserve::model {

kernels::WeightMatrix BindMatrix(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  CHECK(info != nullptr && info->dtype && info->dims.size() == 2) << name;
  return {info->data, *info->dtype, info->dims[1], info->dims[0]};
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

Activations::Activations(int64_t t, int64_t dim, int64_t ffn_dim)
    : x(t * dim), xb(t * dim), proj(t * dim), gate(t * ffn_dim), up(t * ffn_dim), last(t * dim) {}

void NormRows(const float* weight, const float* in, float* out, int64_t rows, int64_t dim,
              float eps, ThreadPool& pool) {
  pool.ParallelFor(rows, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t)
      kernels::RmsNorm(in + t * dim, weight, out + t * dim, dim, eps);
  });
}

void Embed(const kernels::WeightMatrix& table, const TokenRows& rows, float* x, ThreadPool& pool) {
  const int64_t dim = table.cols;
  pool.ParallelFor(rows.num_tokens, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::EmbeddingLookup(table.data, table.dtype, dim, rows.tokens[t], x + t * dim);
    }
  });
}

AttentionWeights BindAttention(const gguf::GgufFile& file, int layer) {
  const std::string p = fmt::format("blk.{}.", layer);
  return {BindVector(file, p + "attn_norm.weight"), BindMatrix(file, p + "attn_q.weight"),
          BindMatrix(file, p + "attn_k.weight"), BindMatrix(file, p + "attn_v.weight"),
          BindMatrix(file, p + "attn_output.weight")};
}

AttentionBuffers::AttentionBuffers(int64_t t, int64_t q_row, int64_t kv_row)
    : q(t * q_row), k(t * kv_row), v(t * kv_row), att(t * q_row) {}

void AttentionBlock(const AttentionLayer& layer, const TokenRows& rows,
                    std::span<const kernels::AttentionSequence> seqs, Activations& act,
                    AttentionBuffers& buf, kernels::AttentionScratch& attention_scratch,
                    kernels::MatMulScratch& matmul_scratch, ThreadPool& pool) {
  const AttentionWeights& w = *layer.weights;
  const kernels::AttentionShape& shape = *layer.shape;
  const int64_t n = rows.num_tokens;
  const int64_t dim = w.o.rows;
  const int64_t q_row = w.q.rows;
  const int64_t kv_row = w.k.rows;
  // 1. Q, K, V of this step's tokens, roped at their positions.
  NormRows(w.norm, act.x.data(), act.xb.data(), n, dim, layer.eps, pool);
  kernels::MatMul(w.q, act.xb.data(), n, buf.q.data(), pool, matmul_scratch);
  kernels::MatMul(w.k, act.xb.data(), n, buf.k.data(), pool, matmul_scratch);
  kernels::MatMul(w.v, act.xb.data(), n, buf.v.data(), pool, matmul_scratch);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::Rope(*layer.rope, buf.q.data() + t * q_row, shape.num_heads, rows.positions[t]);
      kernels::Rope(*layer.rope, buf.k.data() + t * kv_row, shape.num_kv_heads, rows.positions[t]);
    }
  });
  // 2. Store K/V in the cache, then 3. attend reading everything back as stored.
  kernels::WriteKv(*layer.kv, layer.kv_layer, seqs, buf.k.data(), buf.v.data(), pool);
  kernels::PagedAttention(shape, *layer.kv, layer.kv_layer, seqs, buf.q.data(), buf.att.data(),
                          pool, attention_scratch);
  // 4. Output projection and residual.
  kernels::MatMul(w.o, buf.att.data(), n, act.proj.data(), pool, matmul_scratch);
  kernels::AddInPlace(act.x.data(), act.proj.data(), n * dim);
}

FfnWeights BindFfn(const gguf::GgufFile& file, int layer) {
  const std::string p = fmt::format("blk.{}.", layer);
  return {BindVector(file, p + "ffn_norm.weight"), BindMatrix(file, p + "ffn_gate.weight"),
          BindMatrix(file, p + "ffn_up.weight"), BindMatrix(file, p + "ffn_down.weight")};
}

void GatedFfnBlock(const FfnWeights& w, float eps, int64_t n, Activations& act,
                   kernels::MatMulScratch& scratch, ThreadPool& pool) {
  const int64_t dim = w.down.rows;
  const int64_t ffn = w.gate.rows;
  NormRows(w.norm, act.x.data(), act.xb.data(), n, dim, eps, pool);
  kernels::MatMul(w.gate, act.xb.data(), n, act.gate.data(), pool, scratch);
  kernels::MatMul(w.up, act.xb.data(), n, act.up.data(), pool, scratch);
  pool.ParallelFor(n, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      kernels::SiluMul(act.gate.data() + t * ffn, act.up.data() + t * ffn, ffn);
    }
  });
  kernels::MatMul(w.down, act.gate.data(), n, act.proj.data(), pool, scratch);
  kernels::AddInPlace(act.x.data(), act.proj.data(), n * dim);
}

void Logits(const Batch& batch, const TokenRows& rows, const float* norm, float eps,
            const kernels::WeightMatrix& output, Activations& act, kernels::MatMulScratch& scratch,
            ThreadPool& pool, float* logits) {
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
}

}  // namespace kvserve::model
