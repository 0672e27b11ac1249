// Random fills of both backends (backend/cpu/random.cpp, backend/cuda/random.cu), with the
// values of core/rng.h: element i of a contiguous f32/bf16/f16 tensor gets
// mean + stddev * Philox(seed, stream).normal(i), computed by normal_pair with IEEE-rounded
// arithmetic only, so the GPU's values are bitwise the host's. Accumulation rule: t (=).
#pragma once
#include "backend/kernel_list.h"
#include "core/rng.h"
#include "core/tensor.h"

#define ZT_RANDOM_KERNELS(K) K(void, fill_normal, (const Tensor& t, const Philox& rng, float mean, float stddev))

namespace zt::cpu {
ZT_RANDOM_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_RANDOM_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
