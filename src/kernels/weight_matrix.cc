#include "kernels/weight_matrix.h"

#include <fmt/format.h>

#include <string>

#include "gguf/ggml_types.h"

namespace kvserve::kernels {
namespace {

std::string SupportedTypeNames() {
  std::string names;
  for (tensor::DType t : MatMulTypes()) {
    if (!names.empty()) names += ", ";
    names += tensor::DTypeName(t);
  }
  return names;
}

}  // namespace

Result<WeightMatrix> MatrixFromTensor(const gguf::TensorInfo& info) {
  if (info.dims.size() != 2) {
    return InvalidArgument(
        fmt::format("tensor '{}' has {} dimensions, a matrix needs 2", info.name, info.dims.size()));
  }
  if (!info.dtype || !MatMulSupports(*info.dtype)) {
    const std::optional<gguf::GgmlTypeInfo> type = gguf::FindGgmlType(info.ggml_type);
    const std::string name = type ? std::string(type->name) : fmt::format("#{}", info.ggml_type);
    return InvalidArgument(
        fmt::format("tensor '{}' has ggml type {}, which kvserve cannot compute with; supported: {}",
                    info.name, name, SupportedTypeNames()));
  }
  if (!tensor::IsValidRowLength(*info.dtype, info.dims[0])) {
    return InvalidArgument(fmt::format("tensor '{}': row length {} is not a multiple of the {} block",
                                       info.name, info.dims[0], tensor::DTypeName(*info.dtype)));
  }
  return WeightMatrix{info.data, *info.dtype, info.dims[1], info.dims[0]};
}

}  // namespace kvserve::kernels
