// Internal to backend/cpu (the Tensor kernels are in backend/optimizer_kernels.h): the CPU
// optimizer kernels over one contiguous range. P: parameter storage dtype; G: gradient
// dtype; S: state dtype. master: f32 master weights (read and written; the parameter
// receives the rounded value) or nullptr when the parameter holds the weights itself. State
// is f32 (S = float), or bf16 (S = P = bf16, master nullptr: "pure bf16" — every value is
// loaded as f32, updated exactly as with f32 state, and stored rounded to nearest even).
// The *_segments variants update the
// segments of a range (backend/optimizer_segments.h), each with its own weight decay, in
// one parallel region; every element is computed exactly as a per-segment call computes
// it. All run on the instruction set optimizer_isa.h chose (optimizer_loops.h).
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "core/dtype.h"

namespace zt::cpu {

template <class P, class G, class S>
void adamw_step(P* param, float* master, const G* grad, S* m, S* v, int64_t n, const AdamWHyper& h);

// momentum_buf: nullptr when h.momentum == 0.
template <class P, class G, class S>
void sgd_step(P* param, float* master, const G* grad, S* momentum_buf, int64_t n, const SgdHyper& h);

template <class P, class G, class S>
void lion_step(P* param, float* master, const G* grad, S* m, int64_t n, const LionHyper& h);

// The segments' offsets are relative to the pointers given (validated by the caller).
template <class P, class G, class S>
void adamw_step_segments(P* param, float* master, const G* grad, S* m, S* v, const OptimizerSegments& segs,
                         const AdamWHyper& h);
template <class P, class G, class S>
void sgd_step_segments(P* param, float* master, const G* grad, S* momentum_buf, const OptimizerSegments& segs,
                       const SgdHyper& h);
template <class P, class G, class S>
void lion_step_segments(P* param, float* master, const G* grad, S* m, const OptimizerSegments& segs,
                        const LionHyper& h);

}  // namespace zt::cpu
