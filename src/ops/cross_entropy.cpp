// LM head fused with softmax cross-entropy: shape/dtype checks and device dispatch.
//
// Accumulation rule: dinp (activation gradient) is overwritten (=); dweight (parameter
// gradient, the weight's dtype) is accumulated (+=); padding rows (>= vocab_size) of
// dweight are left as they are. losses (optional) is overwritten.
// inp and dinp are f32, or on CUDA f32 or bf16. Tensors on a CUDA device go to
// backend/cross_entropy_kernels.h, others to backend/cpu.
#include "ops/cross_entropy.h"

#include "backend/cross_entropy_kernels.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {
namespace {

void check_common(const char* op, const Tensor& inp, const Tensor& weight, const Tensor& targets, int64_t vocab_size) {
  ZT_CHECK(inp.defined() && inp.dim() == 2, op, ": inp must be [N, C], got ", shape_str(inp.shape()));
  ZT_CHECK(is_activation_dtype(inp), op, ": inp must be f32 (or bf16/f16 on CUDA), got ", dtype_name(inp.dtype()),
           " on ", inp.device().name());
  ZT_CHECK(inp.is_contiguous(), op, ": inp must be contiguous");
  ZT_CHECK(weight.defined() && weight.dim() == 2 && weight.size(1) == inp.size(1), op, ": weight must be [Vp, ",
           inp.size(1), "], got ", shape_str(weight.shape()));
  ZT_CHECK(weight.dtype() == DType::F32 || weight.dtype() == DType::BF16 || weight.dtype() == DType::F16, op,
           ": weight must be f32, bf16 or f16, got ", dtype_name(weight.dtype()));
  ZT_CHECK(weight.is_contiguous(), op, ": weight must be contiguous");
  ZT_CHECK(vocab_size > 0 && vocab_size <= weight.size(0), op, ": vocab_size ", vocab_size,
           " must be in [1, weight rows = ", weight.size(0), "]");
  ZT_CHECK(targets.defined() && targets.dim() == 1 && targets.size(0) == inp.size(0), op, ": targets must be [",
           inp.size(0), "], got ", shape_str(targets.shape()));
  ZT_CHECK(targets.dtype() == DType::I32, op, ": targets must be i32, got ", dtype_name(targets.dtype()));
  ZT_CHECK(targets.is_contiguous(), op, ": targets must be contiguous");
}

}  // namespace

CrossEntropyResult lm_head_cross_entropy_forward(const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                                 int64_t vocab_size, int ignore_index, const Tensor& losses) {
  const char* op = "lm_head_cross_entropy_forward";
  check_common(op, inp, weight, targets, vocab_size);
  const bool has_losses = losses.defined() && losses.data() != nullptr;
  if (has_losses) {
    ZT_CHECK(losses.shape() == Shape{inp.size(0)} && losses.dtype() == DType::F32 && losses.is_contiguous(), op,
             ": losses must be contiguous f32 [", inp.size(0), "], got ", dtype_name(losses.dtype()), " ",
             shape_str(losses.shape()));
  }
  const Device dev = common_device(op, {&inp, &weight, &targets, &losses});
  if (inp.size(0) == 0) return {};
  const CrossEntropySums s = ZT_RUN_KERNEL(
      op, dev,
      lm_head_cross_entropy_forward(inp, weight, targets, vocab_size, ignore_index, has_losses ? losses : Tensor{}, 0));
  return {s.loss_sum, s.count};
}

CrossEntropyResult lm_head_cross_entropy_forward_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp,
                                                          const Tensor& weight, const Tensor& targets,
                                                          int64_t vocab_size, int ignore_index, float grad_scale) {
  const char* op = "lm_head_cross_entropy_forward_backward";
  check_common(op, inp, weight, targets, vocab_size);
  ZT_CHECK(dinp.defined() && dinp.shape() == inp.shape() && is_activation_dtype(dinp) && dinp.is_contiguous(), op,
           ": dinp must be contiguous f32 (or bf16/f16 on CUDA) ", shape_str(inp.shape()), ", got ",
           dtype_name(dinp.dtype()), " ", shape_str(dinp.shape()));
  // dweight without data: a frozen head (LoRA), dinp only.
  ZT_CHECK(!dweight.has_data() || (dweight.shape() == weight.shape() && dweight.dtype() == weight.dtype() &&
                                   dweight.is_contiguous()),
           op, ": dweight must be contiguous ", dtype_name(weight.dtype()), " ", shape_str(weight.shape()), ", got ",
           dtype_name(dweight.dtype()), " ", shape_str(dweight.shape()));
  const Device dev = common_device(op, {&dinp, &dweight, &inp, &weight, &targets});
  if (inp.size(0) == 0) return {};
  const CrossEntropySums s =
      ZT_RUN_KERNEL(op, dev,
                    lm_head_cross_entropy_forward_backward(dinp, dweight, inp, weight, targets, vocab_size,
                                                           ignore_index, grad_scale, 0));
  return {s.loss_sum, s.count};
}

}  // namespace zt::ops
