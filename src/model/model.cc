#include "model/model.h"

#include <algorithm>
#include <variant>

namespace kvserve::model {

int64_t Batch::NumTokens() const {
  int64_t n = 0;
  for (const SequenceInput& s : sequences) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

int64_t Batch::NumLogitRows() const {
  int64_t n = 0;
  for (const SequenceInput& s : sequences) n += s.num_logits;
  return n;
}

Result<LoadOptions> ResolveLoadOptions(const LoadOptions& options, int64_t context_length) {
  LoadOptions resolved = options;
  if (resolved.max_batch_tokens <= 0) return InvalidArgument("max_batch_tokens must be positive");
  if (!resolved.max_context_tokens) {
    resolved.max_context_tokens =
        static_cast<int32_t>(std::min<int64_t>(context_length, INT32_MAX));
  }
  if (*resolved.max_context_tokens <= 0) {
    return InvalidArgument("max_context_tokens must be positive");
  }
  if (resolved.max_threads <= 0) resolved.max_threads = DefaultThreadCount();
  return resolved;
}

KvViews SubViews(const KvViews& views, int first_group, int num_groups, int first_layer,
                 int num_layers) {
  auto slice = [&](auto layers) {  // a copy of the view's layers, renumbered
    if (layers.empty()) return layers;
    return decltype(layers)(layers.begin() + first_layer,
                            layers.begin() + first_layer + num_layers);
  };
  KvViews out;
  for (int g = first_group; g < first_group + num_groups; ++g) {
    tensor::PagedKvView paged = views.paged.at(g);
    paged.layers = slice(paged.layers);
    tensor::PagedLatentView latent = views.latent.at(g);
    latent.layers = slice(latent.layers);
    out.paged.push_back(std::move(paged));
    out.latent.push_back(std::move(latent));
  }
  return out;
}

KvViews ViewsOf(const kv::KvCacheManager& kv) {
  KvViews views;
  views.paged.resize(kv.num_groups());
  views.latent.resize(kv.num_groups());
  for (int g = 0; g < kv.num_groups(); ++g) {
    if (std::holds_alternative<kv::CompressedLatent>(kv.config().groups[g].spec)) {
      views.latent[g] = kv.LatentView(g);
    } else {
      views.paged[g] = kv.KvView(g);
    }
  }
  return views;
}

}  // namespace kvserve::model
