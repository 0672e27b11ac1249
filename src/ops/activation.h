// Pointwise activations: GELU (tanh approximation, GPT-2's "gelu_new"), SiLU, SwiGLU.
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  out may alias inp.
void gelu_forward(const Tensor& out, const Tensor& inp);
// dinp = dout * gelu'(inp) (=). dinp may alias dout.
void gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp);

// out = x * sigmoid(x).
void silu_forward(const Tensor& out, const Tensor& inp);
void silu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp);

// Llama MLP gate: out[N, F] = silu(gate[N, F]) * up[N, F].
void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
// dgate, dup (=). They may be two halves of one buffer.
void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up);

}  // namespace zt::ops
