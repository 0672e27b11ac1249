// Linear layer. The weight is [out_features, in_features] (PyTorch's nn.Linear, the
// default) or [in_features, out_features] with WeightLayout::InOut (GPT-2's Conv1D), so
// checkpoints load in their own layout without a transpose.
// Activations are f32 (on CUDA f32 or bf16); weight/bias f32, bf16 or f16. Runs on the CPU
// backend (OpenBLAS) or, for tensors on a GPU, on cuBLASLt (backend/linear_kernels.h).
#pragma once
#include "backend/weight_layout.h"
#include "core/tensor.h"

namespace zt::ops {

// out[N, O] = inp[N, I] @ weight[O, I]^T (+ bias[O])   (InOut: weight [I, O], inp @ weight).
void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout = WeightLayout::OutIn);

// dinp[N, I] = dout @ weight        (=, skipped when dinp is undefined)
// dweight[O, I] += dout^T @ inp     (skipped when undefined; InOut: dweight[I, O] += inp^T @ dout)
// dbias[O] += sum over rows of dout (skipped when undefined)
void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout = WeightLayout::OutIn);

}  // namespace zt::ops
