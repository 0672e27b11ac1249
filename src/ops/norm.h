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

// The residual add fused with the next branch's norm: res = a + b (rounded to res's dtype:
// the bits of ops::add), then out = LayerNorm(res) with its statistics (the bits of
// layernorm_forward on that res). One pass over the rows on CUDA, where the separate add
// would write res and the norm read it back. res may alias a or b; out may not alias any.
void add_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, float eps);

// out[N, C] = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N] (f32).
void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
// res = a + b, then out = RMSNorm(res): as add_layernorm_forward.
void add_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a, const Tensor& b,
                         const Tensor& weight, float eps);
// dinp (= or +=, as layernorm_backward), dweight (+=).
void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd, GradWrite dinp_write = GradWrite::Overwrite);

}  // namespace zt::ops
