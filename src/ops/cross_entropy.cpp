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
#include "ops/gemm.h"
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

// The split phases' row chunks: f32 logits of about 64 MiB.
int64_t chunk_rows(int64_t N, int64_t vocab_local) {
  return std::max<int64_t>(1, std::min<int64_t>(N, (int64_t{16} << 20) / std::max<int64_t>(vocab_local, 1)));
}

void check_split(const char* op, const Tensor& inp, const Tensor& weight, const Tensor& targets, int64_t vocab_begin,
                 int64_t vocab_local) {
  ZT_CHECK(vocab_begin >= 0 && vocab_local >= 0 && vocab_local <= weight.size(0), op, ": vocab_local ", vocab_local,
           " must be in [0, weight rows = ", weight.size(0), "], vocab_begin ", vocab_begin, " >= 0");
  check_common(op, inp, weight, targets, std::max<int64_t>(vocab_local, 1));
}

void check_f32_rows(const char* op, const char* what, const Tensor& t, int64_t N) {
  ZT_CHECK(t.defined() && t.shape() == Shape{N} && t.dtype() == DType::F32 && t.is_contiguous(), op, ": ", what,
           " must be contiguous f32 [", N, "], got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

void check_stats(const char* op, const Tensor& stats, int64_t N) {
  ZT_CHECK(stats.defined() && stats.shape() == (Shape{3, N}) && stats.dtype() == DType::F32 && stats.is_contiguous(),
           op, ": stats must be contiguous f32 [3, ", N, "], got ", dtype_name(stats.dtype()), " ",
           shape_str(stats.shape()));
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

void lm_head_cross_entropy_partial(const Tensor& stats, const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                   int64_t vocab_begin, int64_t vocab_local, int ignore_index) {
  const char* op = "lm_head_cross_entropy_partial";
  check_split(op, inp, weight, targets, vocab_begin, vocab_local);
  const int64_t N = inp.size(0);
  check_stats(op, stats, N);
  const Device dev = common_device(op, {&stats, &inp, &weight, &targets});
  if (N == 0) return;
  const int64_t R = chunk_rows(N, vocab_local);
  OwnedTensor z({R, std::max<int64_t>(vocab_local, 1)}, DType::F32, dev);
  const Tensor w = weight.narrow(0, 0, vocab_local);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t m = std::min(R, N - r0);
    const Tensor zc = z->narrow(0, 0, m).narrow(1, 0, vocab_local);
    if (vocab_local > 0) gemm(zc, inp.narrow(0, r0, m), Transpose::No, w, Transpose::Yes);
    ZT_RUN_KERNEL(op, dev,
                  cross_entropy_slice_stats(stats, zc, targets.narrow(0, r0, m), r0, vocab_begin, ignore_index));
  }
}

void cross_entropy_rescale(const Tensor& stats, const Tensor& global_max) {
  const char* op = "cross_entropy_rescale";
  ZT_CHECK(stats.dim() == 2, op, ": stats must be [3, N], got ", shape_str(stats.shape()));
  check_stats(op, stats, stats.size(1));
  check_f32_rows(op, "global_max", global_max, stats.size(1));
  const Device dev = common_device(op, {&stats, &global_max});
  if (stats.size(1) == 0) return;
  ZT_RUN_KERNEL(op, dev, cross_entropy_rescale(stats, global_max));
}

void cross_entropy_finish(const Tensor& losses, const Tensor& lse, const Tensor& stats, const Tensor& targets,
                          int ignore_index) {
  const char* op = "cross_entropy_finish";
  const int64_t N = targets.numel();
  check_stats(op, stats, N);
  check_f32_rows(op, "losses", losses, N);
  check_f32_rows(op, "lse", lse, N);
  ZT_CHECK(targets.dtype() == DType::I32 && targets.is_contiguous(), op, ": targets must be contiguous i32");
  const Device dev = common_device(op, {&losses, &lse, &stats, &targets});
  if (N == 0) return;
  ZT_RUN_KERNEL(op, dev, cross_entropy_finish(losses, lse, stats, targets, ignore_index));
}

void lm_head_cross_entropy_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp, const Tensor& weight,
                                    const Tensor& targets, int64_t vocab_begin, int64_t vocab_local, int ignore_index,
                                    const Tensor& lse, float grad_scale) {
  const char* op = "lm_head_cross_entropy_backward";
  check_split(op, inp, weight, targets, vocab_begin, vocab_local);
  const int64_t N = inp.size(0);
  check_f32_rows(op, "lse", lse, N);
  ZT_CHECK(dinp.defined() && dinp.shape() == inp.shape() && is_activation_dtype(dinp) && dinp.is_contiguous(), op,
           ": dinp must be contiguous f32 (or bf16/f16 on CUDA) ", shape_str(inp.shape()), ", got ",
           dtype_name(dinp.dtype()), " ", shape_str(dinp.shape()));
  ZT_CHECK(!dweight.has_data() ||
               (dweight.shape() == weight.shape() && dweight.dtype() == weight.dtype() && dweight.is_contiguous()),
           op, ": dweight must be contiguous ", dtype_name(weight.dtype()), " ", shape_str(weight.shape()), ", got ",
           dtype_name(dweight.dtype()), " ", shape_str(dweight.shape()));
  const Device dev = common_device(op, {&dinp, &dweight, &inp, &weight, &targets, &lse});
  if (N == 0) return;
  if (vocab_local == 0) {  // no tokens here: no share of dinp
    dinp.zero();
    return;
  }
  const int64_t R = chunk_rows(N, vocab_local);
  OwnedTensor z({R, vocab_local}, DType::F32, dev);
  const Tensor w = weight.narrow(0, 0, vocab_local);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t m = std::min(R, N - r0);
    const Tensor zc = z->narrow(0, 0, m), x = inp.narrow(0, r0, m);
    gemm(zc, x, Transpose::No, w, Transpose::Yes);
    ZT_RUN_KERNEL(op, dev,
                  cross_entropy_dlogits(zc, lse.narrow(0, r0, m), targets.narrow(0, r0, m), vocab_begin, ignore_index,
                                        grad_scale));
    gemm(dinp.narrow(0, r0, m), zc, Transpose::No, w, Transpose::No);
    if (dweight.has_data())
      gemm(dweight.narrow(0, 0, vocab_local), zc, Transpose::Yes, x, Transpose::No, 1.0f, GradWrite::Accumulate);
  }
}

}  // namespace zt::ops
