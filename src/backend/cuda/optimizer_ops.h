// CUDA optimizer updates (optimizer.cu) with the meaning of ops/optimizer.h: one call
// updates one contiguous flat range in a single kernel launch. param and grad are f32, bf16
// or f16; master (f32) is undefined when param is f32; all state is f32. The arithmetic
// follows the CPU kernels (backend/cpu/optimizer.cpp) operation by operation, with the
// scalar factors computed on the host in double exactly as there.
#pragma once
#include "backend/optimizer_hyper.h"
#include "core/tensor.h"

namespace zt::cuda {

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h);
// momentum_buf is undefined when h.momentum == 0.
void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h);
void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h);

}  // namespace zt::cuda
