// GgufWriter: GGUF v3 serialization, written atomically (temporary file + rename).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "gguf/gguf.h"

namespace kvserve::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;

// Appends little-endian encodings to a byte vector (this code assumes a little-endian host,
// like the reader).
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void PadTo(uint64_t alignment) {
    out_->resize((out_->size() + alignment - 1) / alignment * alignment, 0);
  }

 private:
  std::vector<uint8_t>* out_;
};

// True when an integer Value fits the on-disk type T: unsigned types hold uint64_t, signed
// types int64_t (as the reader produces them).
template <typename T>
bool Fits(const Value& v) {
  if constexpr (std::is_unsigned_v<T>) {
    const auto* u = std::get_if<uint64_t>(&v.data);
    return u != nullptr && std::in_range<T>(*u);
  } else {
    const auto* s = std::get_if<int64_t>(&v.data);
    return s != nullptr && std::in_range<T>(*s);
  }
}

// Whether the variant alternative (and integer range) matches `type`, recursively.
bool IsWellFormed(const Value& v) {
  switch (v.type) {
    case ValueType::kUint8: return Fits<uint8_t>(v);
    case ValueType::kInt8: return Fits<int8_t>(v);
    case ValueType::kUint16: return Fits<uint16_t>(v);
    case ValueType::kInt16: return Fits<int16_t>(v);
    case ValueType::kUint32: return Fits<uint32_t>(v);
    case ValueType::kInt32: return Fits<int32_t>(v);
    case ValueType::kUint64: return Fits<uint64_t>(v);
    case ValueType::kInt64: return Fits<int64_t>(v);
    case ValueType::kFloat32:
    case ValueType::kFloat64: return std::holds_alternative<double>(v.data);
    case ValueType::kBool: return std::holds_alternative<bool>(v.data);
    case ValueType::kString: return std::holds_alternative<std::string>(v.data);
    case ValueType::kArray: {
      const auto* a = std::get_if<Array>(&v.data);
      if (a == nullptr) return false;
      for (const Value& e : a->elements) {
        if (e.type != a->element_type || !IsWellFormed(e)) return false;
      }
      return true;
    }
  }
  return false;
}

void PutValue(ByteWriter& w, const Value& v) {
  switch (v.type) {
    case ValueType::kUint8: return w.Put(static_cast<uint8_t>(std::get<uint64_t>(v.data)));
    case ValueType::kInt8: return w.Put(static_cast<int8_t>(std::get<int64_t>(v.data)));
    case ValueType::kUint16: return w.Put(static_cast<uint16_t>(std::get<uint64_t>(v.data)));
    case ValueType::kInt16: return w.Put(static_cast<int16_t>(std::get<int64_t>(v.data)));
    case ValueType::kUint32: return w.Put(static_cast<uint32_t>(std::get<uint64_t>(v.data)));
    case ValueType::kInt32: return w.Put(static_cast<int32_t>(std::get<int64_t>(v.data)));
    case ValueType::kUint64: return w.Put(std::get<uint64_t>(v.data));
    case ValueType::kInt64: return w.Put(std::get<int64_t>(v.data));
    case ValueType::kFloat32: return w.Put(static_cast<float>(std::get<double>(v.data)));
    case ValueType::kFloat64: return w.Put(std::get<double>(v.data));
    case ValueType::kBool: return w.Put<uint8_t>(std::get<bool>(v.data) ? 1 : 0);
    case ValueType::kString: return w.PutString(std::get<std::string>(v.data));
    case ValueType::kArray: {
      const Array& a = std::get<Array>(v.data);
      w.Put(static_cast<uint32_t>(a.element_type));
      w.Put<uint64_t>(a.elements.size());
      for (const Value& e : a.elements) PutValue(w, e);
      return;
    }
  }
}

// general.alignment as set by the caller, or 32.
Result<uint64_t> AlignmentOf(const std::vector<std::pair<std::string, Value>>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key != "general.alignment") continue;
    const auto* u = std::get_if<uint64_t>(&value.data);
    if (u == nullptr || *u == 0 || (*u & (*u - 1)) != 0 || *u > (1u << 30)) {
      return InvalidArgument("general.alignment must be an unsigned power of two <= 2^30");
    }
    return *u;
  }
  return kDefaultAlignment;
}

}  // namespace

void GgufWriter::Set(std::string key, Value value) {
  CHECK(IsWellFormed(value)) << "metadata value for '" << key << "' does not match its type "
                             << ValueTypeName(value.type);
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

const Value* GgufWriter::Find(std::string_view key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims, tensor::DType type,
                             std::vector<uint8_t> data) {
  if (name.empty()) return InvalidArgument("tensor name is empty");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgument(fmt::format("duplicate tensor '{}'", name));
  }
  if (!tensor::GgmlTypeId(type)) {
    return InvalidArgument(
        fmt::format("tensor '{}': {} is not a GGUF type", name, tensor::DTypeName(type)));
  }
  if (dims.empty() || dims.size() > 4) {
    return InvalidArgument(
        fmt::format("tensor '{}' has {} dimensions (1..4 allowed)", name, dims.size()));
  }
  int64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || (i > 0 && rows > std::numeric_limits<int64_t>::max() / dims[i])) {
      return InvalidArgument(fmt::format("tensor '{}' dimension {} is {}", name, i, dims[i]));
    }
    if (i > 0) rows *= dims[i];
  }
  if (!tensor::IsValidRowLength(type, dims[0])) {
    return InvalidArgument(fmt::format("tensor '{}' row length {} is not a multiple of {}", name,
                                       dims[0], tensor::BlockElems(type)));
  }
  const int64_t row_bytes = tensor::RowBytes(type, dims[0]);
  if (rows > std::numeric_limits<int64_t>::max() / row_bytes ||
      static_cast<uint64_t>(rows * row_bytes) != data.size()) {
    return InvalidArgument(fmt::format("tensor '{}' has {} bytes of data, its shape needs {}", name,
                                       data.size(), row_bytes * rows));
  }
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
  return Status::Ok();
}

// Layout: header, metadata, tensor infos, padding, then each tensor's data padded to the
// alignment; tensor offsets count from the data section's start.
// Example (alignment 32): data sizes 36, 8 -> offsets 0, 64; the section ends at 96.
std::vector<uint8_t> GgufWriter::Serialize() const {
  Result<uint64_t> alignment_or = AlignmentOf(metadata_);
  CHECK(alignment_or.ok()) << alignment_or.status().ToString();
  const uint64_t alignment = *alignment_or;
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Put<uint32_t>(0x46554747);  // "GGUF"
  w.Put<uint32_t>(3);
  w.Put<uint64_t>(tensors_.size());
  w.Put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    w.PutString(key);
    w.Put(static_cast<uint32_t>(value.type));
    PutValue(w, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    w.PutString(t.name);
    w.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) w.Put<uint64_t>(static_cast<uint64_t>(d));
    w.Put<uint32_t>(*tensor::GgmlTypeId(t.type));
    w.Put<uint64_t>(offset);
    offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
  }
  w.PadTo(alignment);
  for (const PendingTensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    w.PadTo(alignment);
  }
  return out;
}

Status GgufWriter::Write(const std::string& path) const {
  if (Result<uint64_t> alignment = AlignmentOf(metadata_); !alignment.ok()) {
    return alignment.status();
  }
  const std::vector<uint8_t> bytes = Serialize();
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return IoError(fmt::format("writing {}: {}", tmp, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_err = errno;
  if (::close(fd) != 0 || !synced) {
    const int err = synced ? errno : sync_err;
    ::unlink(tmp.c_str());
    return IoError(fmt::format("flushing {}: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return IoError(fmt::format("renaming {} to {}: {}", tmp, path, std::strerror(err)));
  }
  return Status::Ok();
}

}  // namespace kvserve::gguf
