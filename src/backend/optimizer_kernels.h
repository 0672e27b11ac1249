// Optimizer updates of both backends with the meaning of ops/optimizer.h (the ops have
// validated the tensors): backend/cpu/optimizer.cpp (PyTorch's single-tensor updates) and
// backend/cuda/optimizer.cu. CUDA: one call updates one contiguous flat range in a single
// kernel launch; a segmented call updates all the segments of a range in one launch per 64
// segments. param and grad are f32, bf16
// or f16; master (f32) is undefined when param is f32, and state is f32 — or, with a bf16
// param and no master, all state is bf16 (loaded as f32, stored rounded to nearest even). The arithmetic
// follows the CPU kernels (backend/cpu/optimizer_loops.h) operation by operation, with the
// scalar factors computed on the host in double exactly as there.
#pragma once
#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "backend/kernel_list.h"
#include "core/tensor.h"

// momentum_buf is undefined when h.momentum == 0. *_segments: each segment with its own
// weight decay (h.weight_decay is ignored).
#define ZT_OPTIMIZER_KERNELS(K)                                                                                     \
  K(void, adamw_step,                                                                                               \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,               \
     const AdamWHyper& h))                                                                                          \
  K(void, sgd_step,                                                                                                 \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf, const SgdHyper& h)) \
  K(void, lion_step,                                                                                                \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h))           \
  K(void, adamw_step_segments,                                                                                      \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,               \
     const AdamWHyper& h, const OptimizerSegments& segments))                                                       \
  K(void, sgd_step_segments,                                                                                        \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf, const SgdHyper& h,  \
     const OptimizerSegments& segments))                                                                            \
  K(void, lion_step_segments,                                                                                       \
    (const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h,            \
     const OptimizerSegments& segments))

namespace zt::cpu {
ZT_OPTIMIZER_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_OPTIMIZER_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
