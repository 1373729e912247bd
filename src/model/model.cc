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
  return std::count_if(sequences.begin(), sequences.end(),
                       [](const SequenceInput& s) { return s.want_logits; });
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
