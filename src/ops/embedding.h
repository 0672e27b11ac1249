// Token embedding plus optional learned absolute positions (GPT-2's wte + wpe).
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out[B, T, C] = wte[tokens[b, t]] (+ wpe[t]).  tokens: i32 [B, T]; wpe may be undefined.
// A token id outside [0, rows of wte) is bad input: throws BadInput naming the id.
void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);

// dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += sum_b dout[b,t] (when dwpe is defined).
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

}  // namespace zt::ops
