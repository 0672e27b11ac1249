// Tensor-level linear layer (see ops/linear.h).
//
// Accumulation rule: out (=), dinp (=), dweight (+=), dbias (+=).
// Activations (inp, out, dout, dinp) are contiguous with any leading shape: they are read
// as [N, features] with N the product of the leading dimensions; f32, or on CUDA f32 or
// bf16 (each activation independently). weight and bias share one dtype (f32, bf16 or
// f16); dweight and dbias share one floating dtype (normally the weight's).
// The kernels: backend/linear_kernels.h (cuBLASLt on CUDA, OpenBLAS on the CPU).
#include "ops/linear.h"

#include "backend/linear_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
// Rows of a contiguous activation (f32, or bf16 on CUDA) whose last dimension must be `features`.
int64_t rows_of(const char* op, const Tensor& t, int64_t features) {
  ZT_CHECK(is_activation_dtype(t), op, ": activation '", t.name(), "' must be f32 (or bf16/f16 on CUDA), got ",
           dtype_name(t.dtype()), " on ", t.device().name());
  ZT_CHECK(t.is_contiguous(), op, ": activation '", t.name(), "' must be contiguous");
  ZT_CHECK(t.dim() >= 1 && t.size(-1) == features, op, ": activation '", t.name(), "' has shape ", shape_str(t.shape()),
           ", expected last dimension ", features);
  return t.numel() / (features ? features : 1);
}
}  // namespace

void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout) {
  ZT_CHECK(weight.dim() == 2 && weight.is_contiguous() && is_floating(weight.dtype()),
           "linear_forward: weight must be a contiguous floating 2-D tensor, got ", shape_str(weight.shape()));
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const int64_t N = rows_of("linear_forward", inp, I);
  ZT_CHECK(rows_of("linear_forward", out, O) == N, "linear_forward: out ", shape_str(out.shape()), " and inp ",
           shape_str(inp.shape()), " have different row counts");
  const bool has_bias = bias.defined() && bias.data() != nullptr;
  if (has_bias) {
    ZT_CHECK(bias.numel() == O && bias.is_contiguous() && bias.dtype() == weight.dtype(),
             "linear_forward: bias must be a contiguous [", O, "] tensor of the weight's dtype, got ",
             shape_str(bias.shape()), " ", dtype_name(bias.dtype()));
  }
  const Device dev = common_device("linear_forward", {&out, &inp, &weight, &bias});
  ZT_RUN_KERNEL("linear_forward", dev, linear_forward(out, inp, weight, has_bias ? bias : Tensor{}, layout));
}

void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout) {
  ZT_CHECK(weight.dim() == 2 && weight.is_contiguous() && is_floating(weight.dtype()),
           "linear_backward: weight must be a contiguous floating 2-D tensor, got ", shape_str(weight.shape()));
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const int64_t N = rows_of("linear_backward", dout, O);
  const bool has_dinp = dinp.defined() && dinp.data() != nullptr;
  const bool has_dw = dweight.defined() && dweight.data() != nullptr;
  const bool has_db = dbias.defined() && dbias.data() != nullptr;
  if (has_dinp) {
    ZT_CHECK(rows_of("linear_backward", dinp, I) == N, "linear_backward: dinp ", shape_str(dinp.shape()), " and dout ",
             shape_str(dout.shape()), " have different row counts");
  }
  if (has_dw) {
    ZT_CHECK(rows_of("linear_backward", inp, I) == N, "linear_backward: inp ", shape_str(inp.shape()), " and dout ",
             shape_str(dout.shape()), " have different row counts");
    ZT_CHECK(dweight.shape() == weight.shape() && dweight.is_contiguous() && is_floating(dweight.dtype()),
             "linear_backward: dweight must be a contiguous floating ", shape_str(weight.shape()), " tensor, got ",
             shape_str(dweight.shape()));
  }
  if (has_db) {
    ZT_CHECK(dbias.numel() == O && dbias.is_contiguous() && is_floating(dbias.dtype()),
             "linear_backward: dbias must be a contiguous floating [", O, "] tensor, got ", shape_str(dbias.shape()));
  }
  if (has_dw && has_db) {
    ZT_CHECK(dweight.dtype() == dbias.dtype(), "linear_backward: dweight is ", dtype_name(dweight.dtype()),
             " but dbias is ", dtype_name(dbias.dtype()));
  }
  if (!has_dinp && !has_dw && !has_db) return;
  const Device dev = common_device("linear_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight});
  ZT_RUN_KERNEL("linear_backward", dev,
                linear_backward(has_dinp ? dinp : Tensor{}, has_dw ? dweight : Tensor{}, has_db ? dbias : Tensor{},
                                dout, inp, weight, layout));
}

}  // namespace zt::ops
