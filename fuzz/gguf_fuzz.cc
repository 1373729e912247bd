// libFuzzer target: the GGUF reader on arbitrary bytes. Every input must give a file or a
// Status, never a crash, an out-of-bounds read (ASan) or undefined behaviour (UBSan); an
// accepted file's getters and tensor data must be readable in full.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvserve::gguf::GgufFile;
  auto file = GgufFile::FromBuffer(std::vector<uint8_t>(data, data + size));
  if (!file.ok()) return 0;
  const GgufFile& f = **file;
  for (const auto& [key, value] : f.metadata()) {
    (void)f.GetString(key);
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetStringArray(key);
    (void)f.GetIntArray(key);
    (void)f.GetFloatArray(key);
  }
  uint8_t sum = 0;
  for (const kvserve::gguf::TensorInfo& t : f.tensors()) {
    if (reinterpret_cast<uintptr_t>(t.data) % kvserve::gguf::kTensorDataAlignment != 0) {
      __builtin_trap();  // the reader promises aligned tensor data
    }
    const auto* p = reinterpret_cast<const uint8_t*>(t.data);
    for (uint64_t i = 0; i < t.size_bytes; ++i) sum += p[i];
  }
  static volatile uint8_t sink;
  sink = sum;  // keeps the reads
  return 0;
}
