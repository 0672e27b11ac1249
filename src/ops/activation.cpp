// Tensor-level activations (see ops/activation.h).
//
// Accumulation rule: out, dinp, dgate, dup are overwritten (=).
// All tensors of a call share one dtype and have equal element counts: f32, or bf16 when
// they are on CUDA (activations may be bf16 there; the CUDA kernels compute in f32).
// Outputs may alias inputs element for element.
// gelu/silu need contiguous tensors; swiglu takes [..., F] views whose rows may be strided
// (e.g. the two column halves of a fused [N, 2F] gate/up projection).
#include "ops/activation.h"

#include "backend/activation_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
// f32 anywhere; bf16 too on CUDA. `dtype` is the call's (its input's) dtype.
bool activation_dtype_ok(const Tensor& t, DType dtype) { return t.dtype() == dtype && is_activation_dtype(t); }
void check_activation(const char* op, const Tensor& t, int64_t n, DType dtype) {
  ZT_CHECK(activation_dtype_ok(t, dtype) && t.is_contiguous(), op, ": '", t.name(),
           "' must be a contiguous f32 tensor (or bf16/f16 on CUDA) of the input's dtype, got ", dtype_name(t.dtype()),
           " ", shape_str(t.shape()));
  ZT_CHECK(t.numel() == n, op, ": '", t.name(), "' has ", t.numel(), " elements, expected ", n);
}
}  // namespace

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("gelu_forward", inp, n, inp.dtype());
  check_activation("gelu_forward", out, n, inp.dtype());
  const Device dev = common_device("gelu_forward", {&out, &inp});
  ZT_RUN_KERNEL("gelu_forward", dev, gelu_forward(out, inp));
}

void gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("gelu_backward", inp, n, inp.dtype());
  check_activation("gelu_backward", dout, n, inp.dtype());
  check_activation("gelu_backward", dinp, n, inp.dtype());
  const Device dev = common_device("gelu_backward", {&dinp, &dout, &inp});
  ZT_RUN_KERNEL("gelu_backward", dev, gelu_backward(dinp, dout, inp));
}

void silu_forward(const Tensor& out, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("silu_forward", inp, n, inp.dtype());
  check_activation("silu_forward", out, n, inp.dtype());
  const Device dev = common_device("silu_forward", {&out, &inp});
  ZT_RUN_KERNEL("silu_forward", dev, silu_forward(out, inp));
}

void silu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("silu_backward", inp, n, inp.dtype());
  check_activation("silu_backward", dout, n, inp.dtype());
  check_activation("silu_backward", dinp, n, inp.dtype());
  const Device dev = common_device("silu_backward", {&dinp, &dout, &inp});
  ZT_RUN_KERNEL("silu_backward", dev, silu_backward(dinp, dout, inp));
}

namespace {
// t must be a [rows, F] matrix view: last dimension F with stride 1, the leading dimensions
// collapsible into one row index with a uniform row stride (the kernels read it from t).
void check_rows(const char* op, const Tensor& t, int64_t rows, int64_t F, DType dtype) {
  ZT_CHECK(activation_dtype_ok(t, dtype) && t.dim() >= 1 && t.size(-1) == F && t.numel() == rows * F, op, ": '",
           t.name(), "' must be an f32 tensor (or bf16/f16 on CUDA, gate's dtype) of shape [..., ", F, "] with ",
           rows * F, " elements, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  const Shape& sh = t.shape();
  const Shape& st = t.strides();
  const size_t d = sh.size();
  ZT_CHECK(st[d - 1] == 1 || F <= 1, op, ": '", t.name(), "' needs unit stride in its last dimension");
  if (d == 1) return;
  for (size_t k = 0; k + 2 < d; ++k) {
    ZT_CHECK(sh[k] == 1 || st[k] == st[k + 1] * sh[k + 1], op, ": '", t.name(),
             "' has leading dimensions that cannot be flattened into rows");
  }
}
}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  ZT_CHECK(gate.dim() >= 1, "swiglu_forward: gate must have a last dimension");
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  auto ld = [&](const Tensor& t) { check_rows("swiglu_forward", t, rows, F, gate.dtype()); };
  for (const Tensor* t : {&out, &gate, &up}) ld(*t);  // the kernels read the strides themselves
  const Device dev = common_device("swiglu_forward", {&out, &gate, &up});
  ZT_RUN_KERNEL("swiglu_forward", dev, swiglu_forward(out, gate, up));
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  ZT_CHECK(gate.dim() >= 1, "swiglu_backward: gate must have a last dimension");
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  auto ld = [&](const Tensor& t) { check_rows("swiglu_backward", t, rows, F, gate.dtype()); };
  for (const Tensor* t : {&dout, &gate, &up, &dgate, &dup}) ld(*t);
  const Device dev = common_device("swiglu_backward", {&dgate, &dup, &dout, &gate, &up});
  ZT_RUN_KERNEL("swiglu_backward", dev, swiglu_backward(dgate, dup, dout, gate, up));
}

}  // namespace zt::ops
