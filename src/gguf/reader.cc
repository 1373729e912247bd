// GGUF parsing: every read is bounds-checked, every count is checked against the bytes that
// remain before anything is reserved (see gguf.h for the format).
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/internal.h"

namespace kvserve::gguf {
namespace {

constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are rejected
constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1u << 30;
// Metadata values (array elements included) per file. Each costs ~48 bytes in memory, so this
// bounds what a hostile file can make the parser allocate (~800 MiB); real files hold a few
// million at most (vocab tokens, scores, types and merges).
constexpr uint64_t kMaxValues = uint64_t{1} << 24;
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim

// A bounds-checked little-endian cursor over [data, data + size).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  // Corrupt unless n more bytes are available; `what` names them in the message.
  Status Need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return Status::Ok();
    return Corrupt(fmt::format("{} [offset {}, {} bytes] ends past end of file ({} bytes)", what,
                               pos_, n, size_));
  }

  template <typename T>
  Result<T> Read(std::string_view what) {
    KV_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> ReadString(std::string_view what) {
    KV_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return Corrupt(fmt::format("{} [offset {}, length {}] ends past end of file ({} bytes)", what,
                                 pos_, len, size_));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encoded size of one value of type t (arrays: element type + count).
uint64_t MinValueBytes(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kString:
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

Result<ValueType> ReadValueType(ByteReader& r, std::string_view what) {
  const size_t at = r.pos();
  KV_ASSIGN_OR_RETURN(uint32_t raw, r.Read<uint32_t>(what));
  if (raw > static_cast<uint32_t>(ValueType::kFloat64)) {
    return Corrupt(fmt::format("{} [offset {}] is {}, not a GGUF value type", what, at, raw));
  }
  return static_cast<ValueType>(raw);
}

template <typename T, typename Wide>
Result<Value> ReadScalar(ByteReader& r, ValueType type) {
  KV_ASSIGN_OR_RETURN(T v, r.Read<T>("value"));
  return Value{type, static_cast<Wide>(v)};
}

Result<Value> ReadValue(ByteReader& r, ValueType type, int depth, uint64_t& values_left);

Result<Value> ReadArray(ByteReader& r, int depth, uint64_t& values_left) {
  if (depth >= kMaxArrayDepth) {
    return Corrupt(
        fmt::format("arrays nested deeper than {} at offset {}", kMaxArrayDepth, r.pos()));
  }
  KV_ASSIGN_OR_RETURN(ValueType element_type, ReadValueType(r, "array element type"));
  const size_t count_at = r.pos();
  KV_ASSIGN_OR_RETURN(uint64_t count, r.Read<uint64_t>("array length"));
  if (count > r.remaining() / MinValueBytes(element_type)) {
    return Corrupt(
        fmt::format("array of {} {} values [offset {}] cannot fit in the {} bytes "
                    "that remain",
                    count, ValueTypeName(element_type), count_at, r.remaining()));
  }
  if (count > values_left) {
    return Corrupt(
        fmt::format("array of {} values [offset {}] exceeds the limit of {} metadata "
                    "values per file",
                    count, count_at, kMaxValues));
  }
  values_left -= count;
  Array a{element_type, {}};
  a.elements.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    KV_ASSIGN_OR_RETURN(Value v, ReadValue(r, element_type, depth + 1, values_left));
    a.elements.push_back(std::move(v));
  }
  return Value{ValueType::kArray, std::move(a)};
}

Result<Value> ReadValue(ByteReader& r, ValueType type, int depth, uint64_t& values_left) {
  switch (type) {
    case ValueType::kUint8: return ReadScalar<uint8_t, uint64_t>(r, type);
    case ValueType::kInt8: return ReadScalar<int8_t, int64_t>(r, type);
    case ValueType::kUint16: return ReadScalar<uint16_t, uint64_t>(r, type);
    case ValueType::kInt16: return ReadScalar<int16_t, int64_t>(r, type);
    case ValueType::kUint32: return ReadScalar<uint32_t, uint64_t>(r, type);
    case ValueType::kInt32: return ReadScalar<int32_t, int64_t>(r, type);
    case ValueType::kUint64: return ReadScalar<uint64_t, uint64_t>(r, type);
    case ValueType::kInt64: return ReadScalar<int64_t, int64_t>(r, type);
    case ValueType::kFloat32: return ReadScalar<float, double>(r, type);
    case ValueType::kFloat64: return ReadScalar<double, double>(r, type);
    case ValueType::kBool: {
      const size_t at = r.pos();
      KV_ASSIGN_OR_RETURN(uint8_t b, r.Read<uint8_t>("bool value"));
      if (b > 1) return Corrupt(fmt::format("bool value {} at offset {} is not 0 or 1", b, at));
      return Value::Bool(b == 1);
    }
    case ValueType::kString: {
      KV_ASSIGN_OR_RETURN(std::string s, r.ReadString("string value"));
      return Value::Str(std::move(s));
    }
    case ValueType::kArray: return ReadArray(r, depth, values_left);
  }
  return Corrupt("unknown value type");
}

Status ReadHeader(ByteReader& r, ParsedGguf* out, uint64_t* tensor_count, uint64_t* kv_count) {
  KV_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) return Corrupt("not a GGUF file (bad magic)");
  KV_ASSIGN_OR_RETURN(out->version, r.Read<uint32_t>("version"));
  if (out->version != 2 && out->version != 3) {
    if ((out->version & 0xFFFF) == 0 && out->version != 0) {
      return Unimplemented("big-endian GGUF files are not supported");
    }
    return Unimplemented(
        fmt::format("GGUF version {} is not supported (2 and 3 are)", out->version));
  }
  KV_ASSIGN_OR_RETURN(*tensor_count, r.Read<uint64_t>("tensor count"));
  KV_ASSIGN_OR_RETURN(*kv_count, r.Read<uint64_t>("metadata count"));
  if (*kv_count > r.remaining() / kMinKvBytes) {
    return Corrupt(fmt::format("metadata count {} cannot fit in the {} bytes that remain",
                               *kv_count, r.remaining()));
  }
  return Status::Ok();
}

Status ReadMetadata(ByteReader& r, uint64_t kv_count, ParsedGguf* out) {
  std::unordered_set<std::string> seen;
  uint64_t values_left = kMaxValues;
  out->metadata.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    KV_ASSIGN_OR_RETURN(std::string key, r.ReadString(fmt::format("metadata key #{}", i)));
    auto in_key = [&key](const Status& s) {
      return s.WithContext(fmt::format("metadata key '{}'", key));
    };
    Result<ValueType> type = ReadValueType(r, "value type");
    if (!type.ok()) return in_key(type.status());
    Result<Value> value = ReadValue(r, *type, 0, values_left);
    if (!value.ok()) return in_key(value.status());
    if (!seen.insert(key).second) return Corrupt(fmt::format("duplicate metadata key '{}'", key));
    out->metadata.emplace_back(std::move(key), std::move(value).value());
  }
  return Status::Ok();
}

// general.alignment: an integer that is a non-zero power of two (at most 1 GiB).
Status ReadAlignment(ParsedGguf* out) {
  for (const auto& [key, value] : out->metadata) {
    if (key != "general.alignment") continue;
    uint64_t a = 0;
    if (const auto* u = std::get_if<uint64_t>(&value.data)) {
      a = *u;
    } else if (const auto* s = std::get_if<int64_t>(&value.data); s && *s > 0) {
      a = static_cast<uint64_t>(*s);
    } else if (!std::holds_alternative<int64_t>(value.data)) {
      return Corrupt(
          fmt::format("general.alignment has type {}, not an integer", ValueTypeName(value.type)));
    }
    if (a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
      return Corrupt(fmt::format("general.alignment {} is not a power of two in [1, 2^30]", a));
    }
    out->alignment = a;
  }
  return Status::Ok();
}

// Reads one tensor info and computes its size; checks dims, type and offset alignment.
Result<TensorInfo> ReadTensorInfo(ByteReader& r, uint64_t index, uint64_t alignment) {
  TensorInfo t;
  KV_ASSIGN_OR_RETURN(t.name, r.ReadString(fmt::format("tensor #{} name", index)));
  auto bad = [&t](const std::string& m) {
    return Corrupt(fmt::format("tensor '{}' {}", t.name, m));
  };
  if (t.name.empty()) return Corrupt(fmt::format("tensor #{} has an empty name", index));
  KV_ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>("tensor dimension count"));
  if (n_dims == 0 || n_dims > kMaxDims)
    return bad(fmt::format("has {} dimensions (1..4 allowed)", n_dims));
  uint64_t num_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    KV_ASSIGN_OR_RETURN(uint64_t ne, r.Read<uint64_t>("tensor dimension"));
    if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(fmt::format("dimension {} is {}", d, ne));
    }
    if (num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne) {
      return bad("has more elements than fit in 63 bits");
    }
    num_elements *= ne;
    t.dims.push_back(static_cast<int64_t>(ne));
  }
  const size_t type_at = r.pos();
  KV_ASSIGN_OR_RETURN(t.ggml_type, r.Read<uint32_t>("tensor type"));
  const std::optional<GgmlTypeInfo> type = FindGgmlType(t.ggml_type);
  if (!type) return bad(fmt::format("has unknown ggml type {} at offset {}", t.ggml_type, type_at));
  if (t.dims[0] % type->block_elems != 0) {
    return bad(fmt::format("row length {} is not a multiple of the {} block size {}", t.dims[0],
                           type->name, type->block_elems));
  }
  const uint64_t num_blocks = num_elements / static_cast<uint64_t>(type->block_elems);
  if (num_blocks >
      std::numeric_limits<uint64_t>::max() / 2 / static_cast<uint64_t>(type->block_bytes)) {
    return bad("byte size overflows 64 bits");
  }
  t.size_bytes = num_blocks * static_cast<uint64_t>(type->block_bytes);
  t.dtype = tensor::DTypeFromGgmlTypeId(t.ggml_type);
  KV_ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>("tensor offset"));
  if (t.offset % alignment != 0) {
    return bad(
        fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, alignment));
  }
  return t;
}

Status ReadTensorInfos(ByteReader& r, uint64_t tensor_count, ParsedGguf* out) {
  if (tensor_count > r.remaining() / kMinTensorInfoBytes) {
    return Corrupt(fmt::format("tensor count {} cannot fit in the {} bytes that remain",
                               tensor_count, r.remaining()));
  }
  std::unordered_set<std::string> seen;
  out->tensors.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    KV_ASSIGN_OR_RETURN(TensorInfo t, ReadTensorInfo(r, i, out->alignment));
    if (!seen.insert(t.name).second) return Corrupt(fmt::format("duplicate tensor '{}'", t.name));
    out->tensors.push_back(std::move(t));
  }
  return Status::Ok();
}

// Places the data section after the padding and points each tensor into it.
Status ResolveTensorData(const uint8_t* base, size_t size, size_t infos_end, ParsedGguf* out) {
  const uint64_t data_start = (infos_end + out->alignment - 1) / out->alignment * out->alignment;
  if (out->tensors.empty()) return Status::Ok();
  if (data_start > size) {
    return Corrupt(fmt::format("data section [offset {}] starts past end of file ({} bytes)",
                               data_start, size));
  }
  const uint64_t data_bytes = size - data_start;
  for (TensorInfo& t : out->tensors) {
    if (t.offset > data_bytes || t.size_bytes > data_bytes - t.offset) {
      return Corrupt(
          fmt::format("tensor '{}' data [offset {}, {} bytes] ends past end of file ({} bytes)",
                      t.name, data_start + t.offset, t.size_bytes, size));
    }
    t.data = reinterpret_cast<const std::byte*>(base + data_start + t.offset);
  }
  return Status::Ok();
}

}  // namespace

Status ParseGguf(const uint8_t* base, size_t size, ParsedGguf* out) {
  ByteReader r(base, size);
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  KV_RETURN_IF_ERROR(ReadHeader(r, out, &tensor_count, &kv_count));
  KV_RETURN_IF_ERROR(ReadMetadata(r, kv_count, out));
  KV_RETURN_IF_ERROR(ReadAlignment(out));
  KV_RETURN_IF_ERROR(ReadTensorInfos(r, tensor_count, out));
  return ResolveTensorData(base, size, r.pos(), out);
}

}  // namespace kvserve::gguf
