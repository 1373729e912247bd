#include "model/v41_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "kernels/weight_matrix.h"
#include "tensor/dtype.h"

namespace kvserve::model {
namespace {

std::string Key(std::string_view suffix) {
  return fmt::format("{}.{}", kV41Architecture, suffix);
}

Status Positive(int64_t v, std::string_view key) {
  if (v > 0) return Status::Ok();
  return InvalidArgument(fmt::format("{}: {} must be positive", Key(key), v));
}

Status ReadSources(const gguf::GgufFile& file, V41Config& c) {
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> layers, file.GetIntArray(Key("compress.source_layers")));
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> ratios, file.GetIntArray(Key("compress.ratios")));
  if (layers.size() != ratios.size()) {
    return InvalidArgument(fmt::format("{} has {} values, {} has {}", Key("compress.source_layers"),
                                       layers.size(), Key("compress.ratios"), ratios.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= c.num_layers || (i > 0 && layers[i] <= layers[i - 1])) {
      return InvalidArgument(fmt::format("{}: layer {} out of range or not increasing",
                                         Key("compress.source_layers"), layers[i]));
    }
    if (ratios[i] < 1 || ratios[i] > c.window) {
      return InvalidArgument(fmt::format("{}: ratio {} must be in [1, window {}]",
                                         Key("compress.ratios"), ratios[i], c.window));
    }
    c.sources.push_back({static_cast<int>(layers[i]), static_cast<int>(ratios[i])});
  }
  return Status::Ok();
}

Status CheckTensor(const gguf::GgufFile& file, const std::string& name, std::vector<int64_t> dims) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return NotFound(fmt::format("tensor {} is missing", name));
  if (t->dims != dims) {
    return InvalidArgument(fmt::format("tensor {} has shape [{}], want [{}]", name,
                                       fmt::join(t->dims, ", "), fmt::join(dims, ", ")));
  }
  if (dims.size() == 2) return kernels::MatrixFromTensor(*t).status();
  if (t->dtype != tensor::DType::kF32) return InvalidArgument(fmt::format("tensor {} must be f32", name));
  return Status::Ok();
}

// Shapes as GGUF dims (ne[0] = input features first).
Status CheckTensors(const gguf::GgufFile& file, const V41Config& c) {
  const int64_t q_dim = c.num_heads * c.latent_dim;
  KV_RETURN_IF_ERROR(CheckTensor(file, "token_embd.weight", {c.dim, c.vocab_size}));
  KV_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {c.dim}));
  KV_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {c.dim, c.vocab_size}));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_norm.weight", {c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_q.weight", {c.dim, q_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_kv.weight", {c.dim, c.latent_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_output.weight", {q_dim, c.dim}));
    if (std::optional<V41Source> s = c.SourceOf(l)) {
      if (s->layer == l) {
        KV_RETURN_IF_ERROR(
            CheckTensor(file, p + "compress.weight", {s->ratio * c.latent_dim, c.latent_dim}));
        KV_RETURN_IF_ERROR(CheckTensor(file, p + "indexer_k.weight", {c.latent_dim, c.index_dim}));
      }
      KV_RETURN_IF_ERROR(
          CheckTensor(file, p + "indexer_q.weight", {c.dim, c.index_heads * c.index_dim}));
      KV_RETURN_IF_ERROR(CheckTensor(file, p + "indexer_w.weight", {c.dim, c.index_heads}));
    }
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_norm.weight", {c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_gate.weight", {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_up.weight", {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_down.weight", {c.ffn_dim, c.dim}));
  }
  return Status::Ok();
}

Status CheckDims(const V41Config& c) {
  for (auto [v, k] : {std::pair{c.context_length, "context_length"},
                      {c.dim, "embedding_length"},
                      {c.num_layers, "block_count"},
                      {c.ffn_dim, "feed_forward_length"},
                      {c.vocab_size, "vocab_size"},
                      {c.num_heads, "attention.head_count"},
                      {c.latent_dim, "attention.key_length"},
                      {int64_t{c.window}, "attention.sliding_window"},
                      {c.index_heads, "indexer.head_count"},
                      {c.index_dim, "indexer.key_length"},
                      {c.index_top_k, "indexer.top_k"},
                      {c.candidate_blocks, "indexer.candidate_blocks"},
                      {c.candidate_block_size, "indexer.candidate_block_size"}}) {
    KV_RETURN_IF_ERROR(Positive(v, k));
  }
  if (c.latent_dim % 32 != 0 || c.index_dim % 32 != 0) {
    return InvalidArgument(fmt::format("{} ({}) and {} ({}) must be multiples of 32",
                                       Key("attention.key_length"), c.latent_dim,
                                       Key("indexer.key_length"), c.index_dim));
  }
  if (c.rope_dim <= 0 || c.rope_dim % 2 != 0 || c.rope_dim > c.latent_dim) {
    return InvalidArgument(fmt::format("{}: {} must be even and in (0, {}]",
                                       Key("rope.dimension_count"), c.rope_dim, c.latent_dim));
  }
  return Status::Ok();
}

}  // namespace

std::optional<V41Source> V41Config::SourceOf(int layer) const {
  std::optional<V41Source> found;
  for (const V41Source& s : sources) {
    if (s.layer <= layer) found = s;
  }
  return found;
}

Result<V41Config> ReadV41Config(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  if (arch != kV41Architecture) {
    return InvalidArgument(fmt::format("architecture '{}' is not {}", arch, kV41Architecture));
  }
  V41Config c;
  KV_ASSIGN_OR_RETURN(c.context_length, file.GetInt(Key("context_length")));
  KV_ASSIGN_OR_RETURN(c.dim, file.GetInt(Key("embedding_length")));
  KV_ASSIGN_OR_RETURN(c.num_layers, file.GetInt(Key("block_count")));
  KV_ASSIGN_OR_RETURN(c.ffn_dim, file.GetInt(Key("feed_forward_length")));
  KV_ASSIGN_OR_RETURN(c.num_heads, file.GetInt(Key("attention.head_count")));
  KV_ASSIGN_OR_RETURN(c.latent_dim, file.GetInt(Key("attention.key_length")));
  KV_ASSIGN_OR_RETURN(int64_t window, file.GetInt(Key("attention.sliding_window")));
  c.window = static_cast<int>(std::min<int64_t>(window, 1 << 30));
  KV_ASSIGN_OR_RETURN(double eps, file.GetFloatOr(Key("attention.layer_norm_rms_epsilon"), 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  KV_ASSIGN_OR_RETURN(c.rope_dim, file.GetInt(Key("rope.dimension_count")));
  KV_ASSIGN_OR_RETURN(c.rope_freq_base, file.GetFloatOr(Key("rope.freq_base"), 10000.0));
  KV_ASSIGN_OR_RETURN(c.index_heads, file.GetInt(Key("indexer.head_count")));
  KV_ASSIGN_OR_RETURN(c.index_dim, file.GetInt(Key("indexer.key_length")));
  KV_ASSIGN_OR_RETURN(int64_t top_k, file.GetInt(Key("indexer.top_k")));
  c.index_top_k = std::min<int64_t>(top_k, 1 << 30);  // past any context: every entry
  KV_ASSIGN_OR_RETURN(c.candidate_blocks, file.GetIntOr(Key("indexer.candidate_blocks"), 2048));
  KV_ASSIGN_OR_RETURN(c.candidate_block_size,
                      file.GetIntOr(Key("indexer.candidate_block_size"), 8));
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  c.has_weights = embd != nullptr;
  if (c.has_weights) {
    c.vocab_size = embd->dims.size() == 2 ? embd->dims[1] : 0;
  } else {
    KV_ASSIGN_OR_RETURN(c.vocab_size, file.GetInt(Key("vocab_size")));
  }
  KV_RETURN_IF_ERROR(CheckDims(c));
  KV_RETURN_IF_ERROR(ReadSources(file, c));
  if (c.has_weights) KV_RETURN_IF_ERROR(CheckTensors(file, c));
  return c;
}

V41KvLayout MakeV41KvLayout(const V41Config& config, int block_size, int64_t max_model_len,
                            int64_t max_chunk_tokens) {
  V41KvLayout out;
  kv::KvCacheConfig& kc = out.kv_config;
  const int num_layers = static_cast<int>(config.num_layers);
  kc.block_size = block_size;
  kc.max_model_len = max_model_len;
  kc.max_chunk_tokens = max_chunk_tokens;
  out.layers.resize(num_layers);
  kv::KvCacheGroup window;
  window.spec = kv::SlidingWindow{config.window, 1, static_cast<int>(config.latent_dim),
                                  tensor::DType::kFP8_E4M3_E8M0_32, /*shared_kv=*/true};
  for (int l = 0; l < num_layers; ++l) {
    window.layers.push_back(l);
    out.layers[l].window_slot = l;
  }
  kc.groups.push_back(std::move(window));
  std::vector<int> ratios;  // distinct, first-appearance order
  for (const V41Source& s : config.sources) {
    if (std::find(ratios.begin(), ratios.end(), s.ratio) == ratios.end()) ratios.push_back(s.ratio);
  }
  int next_slot = num_layers;
  for (int ratio : ratios) {
    kv::KvCacheGroup group;
    group.spec = kv::CompressedLatent{
        static_cast<int>(config.latent_dim), ratio, static_cast<int>(config.index_dim),
        tensor::DType::kFP4_E2M1_E4M3_16, tensor::DType::kFP4_E2M1_E8M0_32};
    const int g = static_cast<int>(kc.groups.size());
    std::map<int, int> source_slot;  // source layer -> its slot
    for (const V41Source& s : config.sources) {
      if (s.ratio != ratio) continue;
      source_slot[s.layer] = next_slot;
      group.layers.push_back(next_slot);
      out.layers[s.layer] = {s.layer, g, next_slot++, true, ratio};
    }
    for (int l = 0; l < num_layers; ++l) {
      std::optional<V41Source> s = config.SourceOf(l);
      if (!s || s->ratio != ratio || s->layer == l) continue;
      group.readers.push_back({next_slot++, source_slot.at(s->layer)});
      out.layers[l] = {l, g, source_slot.at(s->layer), false, ratio};
    }
    kc.groups.push_back(std::move(group));
  }
  kc.num_layers = next_slot;
  return out;
}

V41KvBytes ComputeV41KvBytes(const V41Config& c) {
  V41KvBytes b;
  const int64_t latent_row = tensor::RowBytes(tensor::DType::kFP4_E2M1_E4M3_16, c.latent_dim);
  const int64_t index_row = tensor::RowBytes(tensor::DType::kFP4_E2M1_E8M0_32, c.index_dim);
  double entries = 0;  // entries per token, all sources
  std::vector<std::string> terms;
  for (const V41Source& s : c.sources) {
    entries += 1.0 / s.ratio;
    terms.push_back(fmt::format("1/{} (layer {})", s.ratio, s.layer));
  }
  b.latent_bytes_per_token = entries * static_cast<double>(latent_row);
  b.index_bytes_per_token = entries * static_cast<double>(index_row);
  b.global_bytes_per_token = b.latent_bytes_per_token + b.index_bytes_per_token;
  b.window_row_bytes = tensor::RowBytes(tensor::DType::kFP8_E4M3_E8M0_32, c.latent_dim);
  b.window_bytes_per_sequence = static_cast<int64_t>(c.window) * c.num_layers * b.window_row_bytes;
  b.lines.push_back(fmt::format(
      "global KV per token: {:g} entries ({}) x ({} B latent fp4_e2m1_e4m3_16 x {} + {} B index "
      "key fp4_e2m1_e8m0_32 x {}) = {:g} B KV + {:g} B indexer = {:g} B",
      entries, fmt::join(terms, " + "), latent_row, c.latent_dim, index_row, c.index_dim,
      b.latent_bytes_per_token, b.index_bytes_per_token, b.global_bytes_per_token));
  b.lines.push_back(fmt::format(
      "sliding-window KV per sequence: {} tokens x {} layers x {} B (fp8_e4m3_e8m0_32 x {}) = "
      "{} B ({:.2f} MiB)",
      c.window, c.num_layers, b.window_row_bytes, c.latent_dim, b.window_bytes_per_sequence,
      static_cast<double>(b.window_bytes_per_sequence) / (1 << 20)));
  return b;
}

}  // namespace kvserve::model
