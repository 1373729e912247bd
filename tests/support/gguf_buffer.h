// Test support: a GgufWriter's bytes parsed back as an in-memory GgufFile (no temporary file).
#pragma once

#include <memory>

#include "core/check.h"
#include "gguf/gguf.h"

namespace kvserve::testing {

// The file `w` would write. CHECKs that it parses.
inline std::shared_ptr<const gguf::GgufFile> ParseWriter(const gguf::GgufWriter& w) {
  auto file = gguf::GgufFile::FromBuffer(w.Serialize());
  CHECK(file.ok()) << file.status().ToString();
  return std::move(file).value();
}

}  // namespace kvserve::testing
