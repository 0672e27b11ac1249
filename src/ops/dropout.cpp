// Tensor-level inverted dropout (see ops/dropout.h).
//
// Accumulation rule: out (=), dinp (=); both may alias their input. Tensors are
// contiguous with equal element counts and one dtype: f32, or bf16 when they are on CUDA
// (activations may be bf16 there); 0 <= p < 1.
#include "ops/dropout.h"

#include "backend/cpu/dropout.h"
#include "backend/cuda/dropout_ops.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
void check(const char* op, const Tensor& y, const Tensor& x, float p) {
  ZT_CHECK(p >= 0.0f && p < 1.0f, op, ": p must be in [0, 1), got ", p);
  for (const Tensor* t : {&y, &x}) {
    const bool dtype_ok = is_activation_dtype(*t);
    ZT_CHECK(dtype_ok && t->dtype() == x.dtype() && t->is_contiguous(), op, ": '", t->name(),
             "' must be a contiguous f32 tensor (or bf16/f16 on CUDA) of the input's dtype, got ", dtype_name(t->dtype()),
             " ", shape_str(t->shape()));
  }
  ZT_CHECK(y.numel() == x.numel(), op, ": sizes ", shape_str(y.shape()), " and ", shape_str(x.shape()));
}
}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  check("dropout_forward", out, inp, p);
  const Device dev = common_device("dropout_forward", {&out, &inp});
  if (dev.is_cuda()) {
    cuda::dropout_forward(out, inp, p, rng);
    return;
  }
  if (!dev.is_cpu()) no_kernel("dropout_forward", dev);
  cpu::dropout_apply(static_cast<float*>(out.data()), static_cast<const float*>(inp.data()), inp.numel(), p, rng);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  check("dropout_backward", dinp, dout, p);
  const Device dev = common_device("dropout_backward", {&dinp, &dout});
  if (dev.is_cuda()) {
    cuda::dropout_backward(dinp, dout, p, rng);
    return;
  }
  if (!dev.is_cpu()) no_kernel("dropout_backward", dev);
  cpu::dropout_apply(static_cast<float*>(dinp.data()), static_cast<const float*>(dout.data()), dout.numel(), p, rng);
}

}  // namespace zt::ops
