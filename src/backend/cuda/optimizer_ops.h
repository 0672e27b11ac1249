// CUDA optimizer updates (optimizer.cu) with the meaning of ops/optimizer.h: one call
// updates one contiguous flat range in a single kernel launch; a segmented call updates all
// the segments of a range in one launch per 64 segments (validated by ops/). param and grad are f32, bf16
// or f16; master (f32) is undefined when param is f32, and state is f32 — or, with a bf16
// param and no master, all state is bf16 (loaded as f32, stored rounded to nearest even). The arithmetic
// follows the CPU kernels (backend/cpu/optimizer.cpp) operation by operation, with the
// scalar factors computed on the host in double exactly as there.
#pragma once
#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "core/tensor.h"

namespace zt::cuda {

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h);
// momentum_buf is undefined when h.momentum == 0.
void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h);
void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h);

// Each segment with its own weight decay (h.weight_decay is ignored).
void adamw_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const OptimizerSegments& segments);
void sgd_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, const OptimizerSegments& segments);
void lion_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const OptimizerSegments& segments);

}  // namespace zt::cuda
