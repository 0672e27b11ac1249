// Tensor-level inverted dropout (see ops/dropout.h).
//
// Accumulation rule: out (=), dinp (=); both may alias their input. Tensors are
// contiguous f32 with equal element counts; 0 <= p < 1.
#include "ops/dropout.h"

#include "backend/cpu/dropout.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
void check(const char* op, const Tensor& y, const Tensor& x, float p) {
  ZT_CHECK(p >= 0.0f && p < 1.0f, op, ": p must be in [0, 1), got ", p);
  for (const Tensor* t : {&y, &x}) {
    ZT_CHECK(t->dtype() == DType::F32 && t->is_contiguous(), op, ": '", t->name(),
             "' must be a contiguous f32 tensor, got ", dtype_name(t->dtype()), " ", shape_str(t->shape()));
  }
  ZT_CHECK(y.numel() == x.numel(), op, ": sizes ", shape_str(y.shape()), " and ", shape_str(x.shape()));
}
}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  check("dropout_forward", out, inp, p);
  const Device dev = common_device("dropout_forward", {&out, &inp});
  if (!dev.is_cpu()) no_kernel("dropout_forward", dev);
  cpu::dropout_apply(static_cast<float*>(out.data()), static_cast<const float*>(inp.data()), inp.numel(), p, rng);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  check("dropout_backward", dinp, dout, p);
  const Device dev = common_device("dropout_backward", {&dinp, &dout});
  if (!dev.is_cpu()) no_kernel("dropout_backward", dev);
  cpu::dropout_apply(static_cast<float*>(dinp.data()), static_cast<const float*>(dout.data()), dout.numel(), p, rng);
}

}  // namespace zt::ops
