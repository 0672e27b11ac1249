// Inverted dropout with a counter-based mask: element i is kept when
// Philox(seed, stream).uniform(i) >= p, and then scaled by 1/(1-p). The mask is never
// stored; backward regenerates it from the same (seed, stream).
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace zt::ops {

// out may alias inp. p == 0 copies.
void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng);
// dinp = dout * mask / (1-p) (=). dinp may alias dout.
void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng);

}  // namespace zt::ops
