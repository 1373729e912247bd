// Parser entry point shared by GgufFile (file.cc) and the parser (reader.cc). Not public.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::gguf {

// What ParseGguf extracts from a file's bytes; tensor data pointers point into those bytes.
struct ParsedGguf {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, Value>> metadata;
  std::vector<TensorInfo> tensors;
};

// Parses and validates the GGUF file in [base, base + size). Never reads outside that range.
Status ParseGguf(const uint8_t* base, size_t size, ParsedGguf* out);

}  // namespace kvserve::gguf
