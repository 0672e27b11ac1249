// CPU optimizer kernels over one contiguous range. P: parameter storage dtype; G: gradient
// dtype. master: f32 master weights (read and written; the parameter receives the rounded
// value) or nullptr when P is float. All state is f32. The *_segments variants update the
// segments of a range (backend/optimizer_segments.h) one after another, each with the
// single-range kernel and its own weight decay, so they are bitwise per-segment calls.
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "core/dtype.h"

namespace zt::cpu {

template <class P, class G>
void adamw_step(P* param, float* master, const G* grad, float* m, float* v, int64_t n, const AdamWHyper& h);

// momentum_buf: nullptr when h.momentum == 0.
template <class P, class G>
void sgd_step(P* param, float* master, const G* grad, float* momentum_buf, int64_t n, const SgdHyper& h);

template <class P, class G>
void lion_step(P* param, float* master, const G* grad, float* m, int64_t n, const LionHyper& h);

// The segments' offsets are relative to the pointers given (validated by the caller).
template <class P, class G>
void adamw_step_segments(P* param, float* master, const G* grad, float* m, float* v, const OptimizerSegments& segs,
                         const AdamWHyper& h);
template <class P, class G>
void sgd_step_segments(P* param, float* master, const G* grad, float* momentum_buf, const OptimizerSegments& segs,
                       const SgdHyper& h);
template <class P, class G>
void lion_step_segments(P* param, float* master, const G* grad, float* m, const OptimizerSegments& segs,
                        const LionHyper& h);

}  // namespace zt::cpu
