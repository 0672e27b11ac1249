// Tensor-level random fills (see ops/random.h).
#include "ops/random.h"

#include "backend/random_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev) {
  ZT_CHECK(t.is_contiguous() && is_floating(t.dtype()), "fill_normal: '", t.name(),
           "' must be a contiguous f32, bf16 or f16 tensor, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  if (t.numel() == 0) return;
  const Device dev = common_device("fill_normal", {&t});
  ZT_RUN_KERNEL("fill_normal", dev, fill_normal(t, rng, mean, stddev));
}

}  // namespace zt::ops
