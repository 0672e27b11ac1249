// CPU linear layer (PyTorch layout: weight [O, I]) on raw pointers, via OpenBLAS sgemm.
//
// Accumulation rule: out (=), dinp (=), dweight (+=), dbias (+=). bf16/f16 weights are
// converted to an f32 scratch buffer and bf16/f16 gradients are computed in f32 and then
// added to the stored values with one rounding. W is the weight's storage type, G the
// gradient's (both in {float, bf16, f16}).
#pragma once
#include <cstdint>

#include "backend/weight_layout.h"
#include "core/dtype.h"

namespace zt::cpu {

// out[N, O] = inp[N, I] @ weight[O, I]^T (+ bias[O]); bias may be null. With
// WeightLayout::InOut the weight is [I, O] and out = inp @ weight.
template <class W>
void linear_forward(float* out, const float* inp, const W* weight, const W* bias, int64_t N, int64_t I,
                    int64_t O, WeightLayout layout = WeightLayout::OutIn);

// dinp[N, I] = dout @ weight (null: skipped); dweight[O, I] += dout^T @ inp (null: skipped);
// dbias[O] += column sums of dout (null: skipped). InOut: dinp = dout @ weight^T and
// dweight[I, O] += inp^T @ dout.
template <class W, class G>
void linear_backward(float* dinp, G* dweight, G* dbias, const float* dout, const float* inp, const W* weight,
                     int64_t N, int64_t I, int64_t O, WeightLayout layout = WeightLayout::OutIn);

}  // namespace zt::cpu
