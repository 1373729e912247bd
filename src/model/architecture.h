// The architecture registry: what kvserve knows of each `general.architecture`. Adding an
// architecture is adding one entry here (model/architecture.cc) with its three functions; the
// engine, the planner, `inspect` and `make-model` find it by name and change nothing.
//
//   read_kv_shape  metadata -> its KV shape (model/kv_layout.h), no tensor bytes read, so
//                  `inspect` and `plan` work on any file of the architecture
//   load           the mapped file -> a Model (model/model.h) with its weights bound in place
//   write_random   a make-model preset -> a GGUF writer with random weights
//   (model/random_weights.h)
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/random_weights.h"

namespace kvserve::model {

struct Architecture {
  std::string_view name;  // llama.cpp's general.architecture
  Result<ModelKvShape> (*read_kv_shape)(const gguf::GgufFile& file);
  Result<std::unique_ptr<Model>> (*load)(std::shared_ptr<const gguf::GgufFile> file,
                                         const LoadOptions& options);
  std::span<const std::string_view> presets;  // make-model --preset names
  Result<gguf::GgufWriter> (*write_random)(std::string_view preset, const RandomWeights& weights);
};

// Every architecture kvserve runs, in a fixed order.
std::span<const Architecture> Architectures();
// The entry for `name`; Unimplemented naming the supported ones otherwise.
Result<const Architecture*> FindArchitecture(std::string_view name);
// The entry for the file's general.architecture (InvalidArgument when the key is missing).
Result<const Architecture*> FindArchitecture(const gguf::GgufFile& file);

}  // namespace kvserve::model
