// GgufFile: opening (mmap or buffer) and typed metadata lookups.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "gguf/gguf.h"
#include "gguf/internal.h"

namespace kvserve::gguf {
namespace {

bool IsInteger(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64: return true;
    default: return false;
  }
}

Status WrongType(std::string_view key, const Value& v, std::string_view wanted) {
  return InvalidArgument(fmt::format("metadata key '{}' has type {}, expected {}", key,
                                     ValueTypeName(v.type), wanted));
}

// An integer Value as int64_t; uint64 values above INT64_MAX are OutOfRange.
Result<int64_t> AsInt(std::string_view key, const Value& v) {
  if (!IsInteger(v.type)) return WrongType(key, v, "an integer");
  if (const auto* s = std::get_if<int64_t>(&v.data)) return *s;
  const uint64_t u = std::get<uint64_t>(v.data);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return OutOfRange(fmt::format("metadata key '{}' value {} does not fit in int64", key, u));
  }
  return static_cast<int64_t>(u);
}

Result<double> AsFloat(std::string_view key, const Value& v) {
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* s = std::get_if<int64_t>(&v.data)) return static_cast<double>(*s);
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
  return WrongType(key, v, "a number");
}

// The value of a present key, or NotFound.
Result<const Value*> Present(const GgufFile& f, std::string_view key) {
  const Value* v = f.Find(key);
  if (v == nullptr) return NotFound(fmt::format("metadata key '{}' is absent", key));
  return v;
}

Result<const Array*> AsArray(std::string_view key, const Value& v) {
  if (const auto* a = std::get_if<Array>(&v.data)) return a;
  return WrongType(key, v, "an array");
}

}  // namespace

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string m = fmt::format("cannot open {}: {}", path, std::strerror(err));
    return err == ENOENT ? NotFound(std::move(m)) : IoError(std::move(m));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(fmt::format("{} is not a readable regular file", path));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return Corrupt(fmt::format("{} is empty, not a GGUF file", path));
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    return IoError(
        fmt::format("cannot mmap {} ({} bytes): {}", path, size, std::strerror(map_err)));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(map);
  file->size_ = size;
  file->mapped_ = true;
  Status s = file->Parse();
  if (!s.ok()) return s.WithContext("reading " + path);
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(std::vector<uint8_t> bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->buffer_ = std::move(bytes);
  file->base_ = file->buffer_.data();
  file->size_ = file->buffer_.size();
  KV_RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
  if (huge_ != nullptr) ::munmap(huge_, huge_size_);
}

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Whether madvise(MADV_HUGEPAGE) can give this process transparent huge pages.
bool TransparentHugePagesOffered() {
  char mode[128] = {};
  const int fd = ::open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, mode, sizeof(mode) - 1);
  ::close(fd);
  return n > 0 && std::strstr(mode, "[never]") == nullptr;
}

}  // namespace

bool GgufFile::MoveTensorDataToHugePages() {
  if (!mapped_ || huge_ != nullptr) return false;
  // The span of the tensors that live in the mapping (aligned copies stay where they are).
  const auto* map_begin = reinterpret_cast<const std::byte*>(base_);
  auto in_mapping = [&](const TensorInfo& t) {
    return t.size_bytes > 0 && t.data >= map_begin && t.data < map_begin + size_;
  };
  const std::byte* begin = map_begin + size_;
  const std::byte* end = map_begin;
  for (const TensorInfo& t : tensors_) {
    if (!in_mapping(t)) continue;
    begin = std::min(begin, t.data);
    end = std::max(end, t.data + t.size_bytes);
  }
  if (end <= begin || static_cast<size_t>(end - begin) < kHugePage) return false;
  if (!TransparentHugePagesOffered()) return false;
  const auto bytes = static_cast<size_t>(end - begin);
  const size_t reserved = bytes + kHugePage;  // room to align the start to 2 MiB
  void* raw = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return false;
  auto* dst = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1));
  ::madvise(dst, bytes, MADV_HUGEPAGE);  // a hint: 4 KiB pages still work
  std::memcpy(dst, begin, bytes);
  ::mprotect(dst, bytes, PROT_READ);
  for (TensorInfo& t : tensors_) {
    if (!in_mapping(t)) continue;
    t.data = dst + (t.data - begin);  // the same offset: alignment kept (dst is 2 MiB aligned)
  }
  // The file's pages of that span are no longer read: drop them from this mapping (they stay
  // in the page cache); the header and metadata before it stay mapped.
  const uintptr_t page = 4096;
  const uintptr_t drop_begin = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
  const uintptr_t drop_end = reinterpret_cast<uintptr_t>(end) & ~(page - 1);
  if (drop_end > drop_begin) {
    ::madvise(reinterpret_cast<void*>(drop_begin), drop_end - drop_begin, MADV_DONTNEED);
  }
  huge_ = raw;
  huge_size_ = reserved;
  return true;
}

Status GgufFile::Parse() {
  ParsedGguf parsed;
  KV_RETURN_IF_ERROR(ParseGguf(base_, size_, &parsed));
  version_ = parsed.version;
  alignment_ = parsed.alignment;
  metadata_ = std::move(parsed.metadata);
  tensors_ = std::move(parsed.tensors);
  // A file with general.alignment below 16 (legal: any power of two) can place a tensor
  // where loading its floats would be a misaligned access (undefined behaviour, a fault on
  // some CPUs): such tensors are copied once into aligned memory.
  for (TensorInfo& t : tensors_) {
    if (reinterpret_cast<uintptr_t>(t.data) % kTensorDataAlignment == 0 || t.size_bytes == 0) {
      continue;
    }
    auto* copy = static_cast<std::byte*>(
        ::operator new[](t.size_bytes, std::align_val_t(kTensorDataAlignment)));
    std::memcpy(copy, t.data, t.size_bytes);
    aligned_copies_.emplace_back(copy, [](std::byte* p) {
      ::operator delete[](p, std::align_val_t(kTensorDataAlignment));
    });
    t.data = copy;
  }
  return Status::Ok();
}

const Value* GgufFile::Find(std::string_view key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  return WrongType(key, *v, "string");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  return AsInt(key, *v);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  KV_ASSIGN_OR_RETURN(const double d, AsFloat(key, *v));
  if (!std::isfinite(d)) {
    return InvalidArgument(fmt::format("metadata key '{}' is {}, not a finite number", key, d));
  }
  return d;
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  return WrongType(key, *v, "bool");
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  KV_ASSIGN_OR_RETURN(const Array* a, AsArray(key, *v));
  if (a->element_type != ValueType::kString) return WrongType(key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(a->elements.size());
  for (const Value& e : a->elements) out.push_back(std::get<std::string>(e.data));
  return out;
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  KV_ASSIGN_OR_RETURN(const Array* a, AsArray(key, *v));
  std::vector<double> out;
  out.reserve(a->elements.size());
  for (const Value& e : a->elements) {
    if (e.type == ValueType::kBool || e.type == ValueType::kString || e.type == ValueType::kArray) {
      return WrongType(key, *v, "an array of numbers");
    }
    KV_ASSIGN_OR_RETURN(double d, AsFloat(key, e));
    out.push_back(d);
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const Value* v, Present(*this, key));
  KV_ASSIGN_OR_RETURN(const Array* a, AsArray(key, *v));
  if (!IsInteger(a->element_type)) return WrongType(key, *v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a->elements.size());
  for (const Value& e : a->elements) {
    KV_ASSIGN_OR_RETURN(int64_t i, AsInt(key, e));
    out.push_back(i);
  }
  return out;
}

Result<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  return Find(key) == nullptr ? Result<int64_t>(fallback) : GetInt(key);
}

Result<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  return Find(key) == nullptr ? Result<double>(fallback) : GetFloat(key);
}

Result<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) == nullptr ? Result<bool>(fallback) : GetBool(key);
}

Result<std::string> GgufFile::GetStringOr(std::string_view key, std::string fallback) const {
  return Find(key) == nullptr ? Result<std::string>(std::move(fallback)) : GetString(key);
}

}  // namespace kvserve::gguf
