// GGUF v3 reader (mmap) and writer. Knows the file format only, nothing about models.
//
// Format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), all little-endian:
//   magic "GGUF", u32 version (2 or 3 read, 3 written), u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value_type, value), tensor_count x (string name, u32 n_dims,
//   n_dims x u64 ne, u32 ggml_type, u64 offset), padding to `general.alignment` (default 32),
//   then the tensor data section; each tensor's offset is relative to that section's start.
//   string = u64 length + bytes (no NUL); array = u32 element_type + u64 count + elements.
//
// Hostile input: every length, count and offset is checked against the bytes that remain
// before anything is allocated or read, so a malformed, truncated or hostile file yields a
// Status naming the problem, never a crash, an out-of-bounds read or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "tensor/dtype.h"

namespace kvserve::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view ValueTypeName(ValueType t);

struct Value;

// A GGUF array: elements all of `element_type`; arrays may nest.
struct Array {
  ValueType element_type = ValueType::kUint8;
  std::vector<Value> elements;
};

// One metadata value. Integers of every width are held widened (unsigned in uint64_t, signed
// in int64_t), floats in double; `type` keeps the on-disk type so a write round-trips exactly.
struct Value {
  ValueType type = ValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  static Value U8(uint8_t v) { return {ValueType::kUint8, uint64_t{v}}; }
  static Value U32(uint32_t v) { return {ValueType::kUint32, uint64_t{v}}; }
  static Value U64(uint64_t v) { return {ValueType::kUint64, v}; }
  static Value I32(int32_t v) { return {ValueType::kInt32, int64_t{v}}; }
  static Value I64(int64_t v) { return {ValueType::kInt64, v}; }
  static Value F32(float v) { return {ValueType::kFloat32, double{v}}; }
  static Value F64(double v) { return {ValueType::kFloat64, v}; }
  static Value Bool(bool v) { return {ValueType::kBool, v}; }
  static Value Str(std::string v) { return {ValueType::kString, std::move(v)}; }
  static Value StrArray(const std::vector<std::string>& v);
  static Value F32Array(const std::vector<float>& v);
  static Value I32Array(const std::vector<int32_t>& v);
};

inline constexpr size_t kTensorDataAlignment = 16;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first: ne[0] is the row length (fastest varying)
  uint32_t ggml_type = 0;     // on-disk type id
  std::optional<tensor::DType> dtype;  // nullopt for ggml types kvserve cannot compute with
  uint64_t offset = 0;        // relative to the data section
  uint64_t size_bytes = 0;
  // Into the mapping, or into an aligned copy the GgufFile owns when the file placed it less
  // than kTensorDataAlignment-aligned (general.alignment may be as low as 1); valid while the
  // GgufFile lives. Always a multiple of kTensorDataAlignment, so kernels may load any
  // element type from it.
  const std::byte* data = nullptr;

  int64_t NumElements() const;
};

// A GGUF file opened read-only. Owns its mapping (or buffer). Immutable after Open (and
// MoveTensorDataToHugePages), so concurrent reads are safe.
class GgufFile {
 public:
  // mmaps the file and parses it.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory copy (tests, fuzzing).
  static Result<std::unique_ptr<GgufFile>> FromBuffer(std::vector<uint8_t> bytes);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* Find(std::string_view key) const;  // nullptr when absent

  // Typed getters: NotFound when absent, InvalidArgument naming the key when the type does
  // not fit (GetInt accepts any integer type; GetFloat any float or integer type, and not NaN
  // or an infinity: no model parameter is one, and one would silently poison every output).
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // The same with a default when the key is absent (a present key of the wrong type is still
  // an error).
  Result<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  Result<double> GetFloatOr(std::string_view key, double fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;
  Result<std::string> GetStringOr(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;  // nullptr when absent

  // Moves the tensor data of an mmapped file into anonymous memory backed by 2 MiB pages
  // (madvise MADV_HUGEPAGE) and points every TensorInfo::data there; the file's pages are
  // released. A decode step streams every weight once: with 4 KiB pages each page costs a TLB
  // miss (a nested page walk in a VM), measured as ~18% of a Q8_0 decode step's matmul time.
  // Does nothing (returns false) for a buffer, below 2 MiB of tensor data, when the kernel
  // offers no transparent huge pages ("[never]") or when the memory cannot be had (the
  // mapping stays in use). Call before the TensorInfo pointers are handed out (model load);
  // not thread-safe.
  bool MoveTensorDataToHugePages();

 private:
  GgufFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> buffer_;  // backing store for FromBuffer
  // The anonymous mapping MoveTensorDataToHugePages made (munmapped with the file), or null.
  void* huge_ = nullptr;
  size_t huge_size_ = 0;
  // Aligned copies of tensors the file placed misaligned (see TensorInfo::data).
  std::vector<std::unique_ptr<std::byte[], void (*)(std::byte*)>> aligned_copies_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorInfo> tensors_;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors in insertion order, each tensor
// aligned to `general.alignment` (32 unless set). Not thread-safe.
class GgufWriter {
 public:
  // Replaces an existing key's value in place.
  void Set(std::string key, Value value);
  // The value set for `key`, or nullptr.
  const Value* Find(std::string_view key) const;
  // dims: ne[0] first. data must be RowBytes(type, dims[0]) * (product of other dims) bytes.
  Status AddTensor(std::string name, std::vector<int64_t> dims, tensor::DType type,
                   std::vector<uint8_t> data);
  // Writes to `path` via a temporary file and rename.
  Status Write(const std::string& path) const;
  // The file's bytes (tests).
  std::vector<uint8_t> Serialize() const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    tensor::DType type;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kvserve::gguf
