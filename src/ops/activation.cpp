// Tensor-level activations (see ops/activation.h).
//
// Accumulation rule: out, dinp, dgate, dup are overwritten (=).
// All tensors of a call share one dtype and have equal element counts: f32, or bf16 when
// they are on CUDA (activations may be bf16 there; the CUDA kernels compute in f32).
// Outputs may alias inputs element for element.
// gelu/silu need contiguous tensors; swiglu takes [..., F] views whose rows may be strided
// (e.g. the two column halves of a fused [N, 2F] gate/up projection).
#include "ops/activation.h"

#include "backend/cpu/activation.h"
#include "backend/cuda/activation_ops.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
// f32 anywhere; bf16 too on CUDA. `dtype` is the call's (its input's) dtype.
bool activation_dtype_ok(const Tensor& t, DType dtype) { return t.dtype() == dtype && is_activation_dtype(t); }
void check_activation(const char* op, const Tensor& t, int64_t n, DType dtype) {
  ZT_CHECK(activation_dtype_ok(t, dtype) && t.is_contiguous(), op, ": '", t.name(),
           "' must be a contiguous f32 tensor (or bf16/f16 on CUDA) of the input's dtype, got ", dtype_name(t.dtype()), " ",
           shape_str(t.shape()));
  ZT_CHECK(t.numel() == n, op, ": '", t.name(), "' has ", t.numel(), " elements, expected ", n);
}
const float* cf(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* mf(const Tensor& t) { return static_cast<float*>(t.data()); }
}  // namespace

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("gelu_forward", inp, n, inp.dtype());
  check_activation("gelu_forward", out, n, inp.dtype());
  const Device dev = common_device("gelu_forward", {&out, &inp});
  if (dev.is_cuda()) {
    cuda::gelu_forward(out, inp);
    return;
  }
  if (!dev.is_cpu()) no_kernel("gelu_forward", dev);
  cpu::gelu_forward(mf(out), cf(inp), n);
}

void gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("gelu_backward", inp, n, inp.dtype());
  check_activation("gelu_backward", dout, n, inp.dtype());
  check_activation("gelu_backward", dinp, n, inp.dtype());
  const Device dev = common_device("gelu_backward", {&dinp, &dout, &inp});
  if (dev.is_cuda()) {
    cuda::gelu_backward(dinp, dout, inp);
    return;
  }
  if (!dev.is_cpu()) no_kernel("gelu_backward", dev);
  cpu::gelu_backward(mf(dinp), cf(dout), cf(inp), n);
}

void silu_forward(const Tensor& out, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("silu_forward", inp, n, inp.dtype());
  check_activation("silu_forward", out, n, inp.dtype());
  const Device dev = common_device("silu_forward", {&out, &inp});
  if (dev.is_cuda()) {
    cuda::silu_forward(out, inp);
    return;
  }
  if (!dev.is_cpu()) no_kernel("silu_forward", dev);
  cpu::silu_forward(mf(out), cf(inp), n);
}

void silu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const int64_t n = inp.numel();
  check_activation("silu_backward", inp, n, inp.dtype());
  check_activation("silu_backward", dout, n, inp.dtype());
  check_activation("silu_backward", dinp, n, inp.dtype());
  const Device dev = common_device("silu_backward", {&dinp, &dout, &inp});
  if (dev.is_cuda()) {
    cuda::silu_backward(dinp, dout, inp);
    return;
  }
  if (!dev.is_cpu()) no_kernel("silu_backward", dev);
  cpu::silu_backward(mf(dinp), cf(dout), cf(inp), n);
}

namespace {
// A [rows, F] matrix view of t: last dimension F with stride 1, the leading dimensions
// collapsible into one row index with a uniform row stride (returned).
int64_t row_stride(const char* op, const Tensor& t, int64_t rows, int64_t F, DType dtype) {
  ZT_CHECK(activation_dtype_ok(t, dtype) && t.dim() >= 1 && t.size(-1) == F && t.numel() == rows * F, op, ": '",
           t.name(), "' must be an f32 tensor (or bf16/f16 on CUDA, gate's dtype) of shape [..., ", F, "] with ",
           rows * F, " elements, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  const Shape& sh = t.shape();
  const Shape& st = t.strides();
  const size_t d = sh.size();
  ZT_CHECK(st[d - 1] == 1 || F <= 1, op, ": '", t.name(), "' needs unit stride in its last dimension");
  if (d == 1) return F;
  for (size_t k = 0; k + 2 < d; ++k) {
    ZT_CHECK(sh[k] == 1 || st[k] == st[k + 1] * sh[k + 1], op, ": '", t.name(),
             "' has leading dimensions that cannot be flattened into rows");
  }
  return st[d - 2];
}
}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  ZT_CHECK(gate.dim() >= 1, "swiglu_forward: gate must have a last dimension");
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  auto ld = [&](const Tensor& t) { return row_stride("swiglu_forward", t, rows, F, gate.dtype()); };
  cpu::SwigluLayout L{rows, F, ld(out), ld(gate), ld(up)};
  const Device dev = common_device("swiglu_forward", {&out, &gate, &up});
  if (dev.is_cuda()) {
    cuda::swiglu_forward(out, gate, up);
    return;
  }
  if (!dev.is_cpu()) no_kernel("swiglu_forward", dev);
  cpu::swiglu_forward(mf(out), cf(gate), cf(up), L);
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  ZT_CHECK(gate.dim() >= 1, "swiglu_backward: gate must have a last dimension");
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  auto ld = [&](const Tensor& t) { return row_stride("swiglu_backward", t, rows, F, gate.dtype()); };
  cpu::SwigluLayout L{rows, F, ld(dout), ld(gate), ld(up), ld(dgate), ld(dup)};
  const Device dev = common_device("swiglu_backward", {&dgate, &dup, &dout, &gate, &up});
  if (dev.is_cuda()) {
    cuda::swiglu_backward(dgate, dup, dout, gate, up);
    return;
  }
  if (!dev.is_cpu()) no_kernel("swiglu_backward", dev);
  cpu::swiglu_backward(mf(dgate), mf(dup), cf(dout), cf(gate), cf(up), L);
}

}  // namespace zt::ops
