// Linear layer in PyTorch's layout: weight is [out_features, in_features].
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out[N, O] = inp[N, I] @ weight[O, I]^T (+ bias[O]).
void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);

// dinp[N, I] = dout @ weight        (=, skipped when dinp is undefined)
// dweight[O, I] += dout^T @ inp     (skipped when undefined)
// dbias[O] += sum over rows of dout (skipped when undefined)
void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight);

}  // namespace zt::ops
