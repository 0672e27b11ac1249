// CPU optimizer kernels over one contiguous range. P: parameter storage dtype; G: gradient
// dtype. master: f32 master weights (read and written; the parameter receives the rounded
// value) or nullptr when P is float. All state is f32.
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "core/dtype.h"

namespace zt::cpu {

template <class P, class G>
void adamw_step(P* param, float* master, const G* grad, float* m, float* v, int64_t n, const AdamWHyper& h);

// momentum_buf: nullptr when h.momentum == 0.
template <class P, class G>
void sgd_step(P* param, float* master, const G* grad, float* momentum_buf, int64_t n, const SgdHyper& h);

template <class P, class G>
void lion_step(P* param, float* master, const G* grad, float* m, int64_t n, const LionHyper& h);

}  // namespace zt::cpu
