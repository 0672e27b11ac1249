// CPU LM head fused with softmax cross-entropy.
//
// Accumulation rule: dinp is an activation gradient (=); dweight is a parameter gradient
// (+=, in the weight's dtype). losses (optional) is overwritten.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zt::cpu {

struct CrossEntropySums {
  double loss_sum = 0.0;
  int64_t count = 0;
};

// inp [N, C] f32; weight [Vp, C] of weight_dtype (f32/bf16/f16), only rows < V take part;
// targets i32 [N] (must be in [0, V) or == ignore_index; throws BadInput otherwise).
// losses: optional f32 [N] (nullptr for none), 0 on ignored rows.
// If dinp is not null, also the backward of L = grad_scale * loss_sum:
// dinp [N, C] (=), dweight [Vp, C] of weight_dtype (+=; padding rows untouched).
CrossEntropySums lm_head_cross_entropy(const float* inp, const void* weight, DType weight_dtype,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, int64_t Vp,
                                       int ignore_index, float* losses, float* dinp, void* dweight,
                                       float grad_scale);

}  // namespace zt::cpu
