// From a GGUF tensor to the kernels::WeightMatrix the MatMul reads: the one place that decides
// which ggml types kvserve computes with, so every model and tool refuses the others alike.
#pragma once

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"

namespace kvserve::kernels {

// The matrix view of a 2-D tensor (rows = dims[1], cols = dims[0]); does not copy. Errors
// (InvalidArgument) name the tensor: not 2-D; a ggml type MatMul cannot read, by ggml's own
// name (e.g. "tensor 'blk.0.ffn_down.weight' has ggml type iq2_xxs, which kvserve cannot
// compute with; supported: f32, f16, ..."); a row length that is not a whole number of blocks.
Result<WeightMatrix> MatrixFromTensor(const gguf::TensorInfo& info);

}  // namespace kvserve::kernels
