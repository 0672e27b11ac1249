// CPU LayerNorm and RMSNorm over the last dimension, on raw pointers.
//
// Accumulation rule: out, mean, rstd (=); dinp (= or +=, dinp_write); dweight, dbias (+=). Row statistics
// are f32. Parameter gradients are column sums over rows, computed in fixed row chunks
// combined in chunk order (the same bits for any thread count) and added to the stored
// gradient with one rounding. W: weight/bias storage type, G: gradient storage type.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/grad_write.h"

namespace zt::cpu {

// mean, rstd may be null (not saved); bias may be null.
template <class W>
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const W* weight, const W* bias,
                       int64_t N, int64_t C, float eps);
// dinp may be null; dbias may be null. dinp may alias dout when overwritten (dinp_write =
// Overwrite), not when accumulated.
template <class W, class G>
void layernorm_backward(float* dinp, G* dweight, G* dbias, const float* dout, const float* inp, const W* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C,
                        GradWrite dinp_write = GradWrite::Overwrite);

template <class W>
void rmsnorm_forward(float* out, float* rstd, const float* inp, const W* weight, int64_t N, int64_t C, float eps);
template <class W, class G>
void rmsnorm_backward(float* dinp, G* dweight, const float* dout, const float* inp, const W* weight,
                      const float* rstd, int64_t N, int64_t C, GradWrite dinp_write = GradWrite::Overwrite);

}  // namespace zt::cpu
