// Tensor-level inverted dropout (see ops/dropout.h).
//
// Accumulation rule: out (=), dinp (=); both may alias their input. Tensors are
// contiguous with equal element counts and one dtype: f32, or bf16 when they are on CUDA
// (activations may be bf16 there); 0 <= p < 1.
#include "ops/dropout.h"

#include "backend/dropout_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
void check(const char* op, const Tensor& y, const Tensor& x, float p) {
  ZT_CHECK(p >= 0.0f && p < 1.0f, op, ": p must be in [0, 1), got ", p);
  for (const Tensor* t : {&y, &x}) {
    const bool dtype_ok = is_activation_dtype(*t);
    ZT_CHECK(dtype_ok && t->dtype() == x.dtype() && t->is_contiguous(), op, ": '", t->name(),
             "' must be a contiguous f32 tensor (or bf16/f16 on CUDA) of the input's dtype, got ",
             dtype_name(t->dtype()), " ", shape_str(t->shape()));
  }
  ZT_CHECK(y.numel() == x.numel(), op, ": sizes ", shape_str(y.shape()), " and ", shape_str(x.shape()));
}
}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  check("dropout_forward", out, inp, p);
  const Device dev = common_device("dropout_forward", {&out, &inp});
  ZT_RUN_KERNEL("dropout_forward", dev, dropout_forward(out, inp, p, rng));
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  check("dropout_backward", dinp, dout, p);
  const Device dev = common_device("dropout_backward", {&dinp, &dout});
  ZT_RUN_KERNEL("dropout_backward", dev, dropout_backward(dinp, dout, p, rng));
}

}  // namespace zt::ops
