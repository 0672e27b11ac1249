// CPU inverted dropout with a counter-based (Philox) mask, on raw pointers.
//
// Accumulation rule: out and dinp are overwritten (=); both may alias their input.
// Element i is kept when rng.uniform(i) >= p and then scaled by 1/(1-p); the mask depends
// only on (seed, stream, i), never on the thread count.
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace zt::cpu {

// y[i] = keep(i) ? x[i] * scale : 0. Used for both forward and backward.
void dropout_apply(float* y, const float* x, int64_t n, float p, const Philox& rng);

}  // namespace zt::cpu
