// Value helpers shared by the reader and the writer.
#include "gguf/gguf.h"

namespace kvserve::gguf {

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

Value Value::StrArray(const std::vector<std::string>& v) {
  Array a{ValueType::kString, {}};
  a.elements.reserve(v.size());
  for (const std::string& s : v) a.elements.push_back(Str(s));
  return {ValueType::kArray, std::move(a)};
}

Value Value::F32Array(const std::vector<float>& v) {
  Array a{ValueType::kFloat32, {}};
  a.elements.reserve(v.size());
  for (float f : v) a.elements.push_back(F32(f));
  return {ValueType::kArray, std::move(a)};
}

Value Value::I32Array(const std::vector<int32_t>& v) {
  Array a{ValueType::kInt32, {}};
  a.elements.reserve(v.size());
  for (int32_t i : v) a.elements.push_back(I32(i));
  return {ValueType::kArray, std::move(a)};
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the reader and writer reject products that overflow
  return n;
}

}  // namespace kvserve::gguf
