// Copies between tensors on any devices (host <-> GPU, GPU <-> GPU, host <-> host),
// converting the dtype on the way (f32, bf16, f16; integers only to the same dtype).
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// dst = src: same element count, both contiguous. Copies that involve the GPU are queued
// on its compute stream; one that ends on the host waits for it.
void copy(const Tensor& dst, const Tensor& src);

}  // namespace zt::ops
