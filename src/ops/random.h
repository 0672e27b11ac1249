// Random initialisation on any device: element i of a contiguous f32/bf16/f16 tensor gets
// mean + stddev * Philox(seed, stream).normal(i), the same bits on the host and the GPU
// (core/rng.h's normal_pair), so a model initialised where it trains equals one initialised
// on the host and copied.
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace zt::ops {

// t (=): contiguous, f32, bf16 or f16.
void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev);

}  // namespace zt::ops
