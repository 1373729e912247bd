// kernels::MatrixFromTensor: the GGUF tensor -> MatMul weight view, and its errors.
#include "kernels/weight_matrix.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve::kernels {
namespace {

gguf::TensorInfo Tensor(std::string name, std::vector<int64_t> dims, uint32_t ggml_type) {
  gguf::TensorInfo t;
  t.name = std::move(name);
  t.dims = std::move(dims);
  t.ggml_type = ggml_type;
  t.dtype = tensor::DTypeFromGgmlTypeId(ggml_type);
  return t;
}

void ExpectError(const gguf::TensorInfo& t, const std::string& needle) {
  Result<WeightMatrix> m = MatrixFromTensor(t);
  ASSERT_FALSE(m.ok()) << t.name;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().ToString();
}

TEST(MatrixFromTensor, ViewsSupportedTypes) {
  for (tensor::DType t : MatMulTypes()) {
    gguf::TensorInfo info = Tensor("w", {512, 3}, *tensor::GgmlTypeId(t));
    Result<WeightMatrix> m = MatrixFromTensor(info);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->rows, 3);
    EXPECT_EQ(m->cols, 512);
    EXPECT_EQ(m->dtype, t);
  }
}

TEST(MatrixFromTensor, NamesGgmlTypeAndTensor) {
  ExpectError(Tensor("blk.3.ffn_down.weight", {256, 8}, 16),
              "tensor 'blk.3.ffn_down.weight' has ggml type iq2_xxs, which kvserve cannot compute");
  ExpectError(Tensor("output.weight", {256, 8}, 34), "ggml type tq1_0");
  ExpectError(Tensor("token_embd.weight", {256, 8}, 9), "ggml type q8_1");
  ExpectError(Tensor("x.weight", {256, 8}, 28), "ggml type f64");
  ExpectError(Tensor("x.weight", {256, 8, 2}, 0), "has 3 dimensions");
}

}  // namespace
}  // namespace kvserve::kernels
