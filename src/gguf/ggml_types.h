// Block tables of the ggml tensor types a GGUF file may hold, so files with types kvserve
// cannot compute with (Q4_K, IQ2_XS, ...) still open and report exact tensor sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvserve::gguf {

struct GgmlTypeInfo {
  uint32_t id = 0;          // GGML_TYPE_* value
  std::string_view name;    // ggml's name, e.g. "q4_K"
  int64_t block_elems = 1;  // values per block
  int64_t block_bytes = 0;  // bytes per block
};

// nullopt for ids ggml never assigned (or retired without a layout).
std::optional<GgmlTypeInfo> FindGgmlType(uint32_t id);

}  // namespace kvserve::gguf
