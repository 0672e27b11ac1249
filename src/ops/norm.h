// LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension.
#pragma once
#include "core/grad_write.h"
#include "core/tensor.h"

namespace zt::ops {

// out[N, C] = (inp - mean) * rstd * weight + bias; saves mean[N] and rstd[N] (f32).
// bias may be undefined (no bias).
void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps);
// dinp (= or, with GradWrite::Accumulate, +=: the residual stream's gradient takes the
// branch's share in the same pass), dweight (+=), dbias (+=, skipped when undefined).
// dinp may alias dout only when overwritten.
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                        GradWrite dinp_write = GradWrite::Overwrite);

// out[N, C] = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N] (f32).
void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
// dinp (= or +=, as layernorm_backward), dweight (+=).
void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd, GradWrite dinp_write = GradWrite::Overwrite);

}  // namespace zt::ops
