// CPU pointwise activations (f32) on raw pointers: GELU (tanh form), SiLU, SwiGLU.
//
// Accumulation rule: all outputs and gradients are overwritten (=). Outputs may alias
// their inputs element for element (out == inp, dinp == dout).
#pragma once
#include <cstdint>

namespace zt::cpu {

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void silu_forward(float* out, const float* inp, int64_t n);
void silu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
// SwiGLU on [rows, F] matrices whose rows may be strided (ld_* = elements between rows),
// so gate and up may be the two column halves of one fused [rows, 2F] projection.
struct SwigluLayout {
  int64_t rows, F;
  int64_t ld_out, ld_gate, ld_up;  // forward: out; backward: ld_out is dout's
  int64_t ld_dgate = 0, ld_dup = 0;  // backward only
};
void swiglu_forward(float* out, const float* gate, const float* up, const SwigluLayout& L);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                     const SwigluLayout& L);

}  // namespace zt::cpu
