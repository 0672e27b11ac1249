#include "ops/optimizer.h"

#include "backend/optimizer_kernels.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {
namespace {

// Checks shared by every update: equal sizes, contiguous ranges, and either f32 state (with
// a master copy exactly when the parameter is stored in 16 bits) or bf16 parameter and
// state with no master. Returns the device (CPU or CUDA).
Device check_common(const char* op, const Tensor& param, const Tensor& master, const Tensor& grad,
                    std::initializer_list<const Tensor*> state) {
  const int64_t n = param.numel();
  ZT_CHECK(grad.numel() == n, op, ": gradient of ", grad.numel(), " elements for ", n, " parameters (", param.name(),
           ")");
  ZT_CHECK(param.is_contiguous() && grad.is_contiguous(), op, ": parameter and gradient must be contiguous");
  const bool no_master_16 = !master.has_data() && param.dtype() != DType::F32;
  for (const Tensor* s : state) {
    ZT_CHECK(s->numel() == n && s->is_contiguous(), op, ": state size differs for ", param.name());
    if (no_master_16) {
      ZT_CHECK(s->dtype() == param.dtype(), op, ": without a master copy the optimizer state must be ",
               dtype_name(param.dtype()), " as the parameter, got ", dtype_name(s->dtype()), " (", param.name(), ")");
    } else {
      ZT_CHECK(s->dtype() == DType::F32, op, ": optimizer state must be f32 (", param.name(), ")");
    }
  }
  if (master.has_data()) {
    ZT_CHECK(master.dtype() == DType::F32 && master.numel() == n && master.is_contiguous(), op,
             ": master must be contiguous f32 of the parameter's size");
  } else {
    ZT_CHECK(param.dtype() == DType::F32 || param.dtype() == DType::BF16, op,
             ": an f16 parameter needs an f32 master copy (no-master updates are bf16 only)");
  }
  const Device dev = common_device(op, {&param, &master, &grad});
  for (const Tensor* s : state)
    if (s->has_data())
      ZT_CHECK(s->device() == dev, op, ": state on ", s->device().name(), ", parameter on ", dev.name());
  if (!dev.is_cpu() && !dev.is_cuda()) no_kernel(op, dev);
  return dev;
}

// Segments sorted by offset, non-overlapping and inside [0, n) (empty ones allowed).
void check_segments(const char* op, const Tensor& param, const OptimizerSegments& segments) {
  const int64_t n = param.numel();
  int64_t end = 0;
  for (const OptimizerSegment& s : segments) {
    ZT_CHECK(s.offset >= 0 && s.length >= 0 && s.offset <= n && s.length <= n - s.offset, op, ": segment [", s.offset,
             ", +", s.length, ") is outside the range of ", n, " elements (", param.name(), ")");
    ZT_CHECK(s.offset >= end, op, ": segment at ", s.offset, " overlaps or precedes the previous one, which ends at ",
             end, " (", param.name(), ")");
    end = s.offset + s.length;
  }
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h) {
  const Device dev = check_common("adamw_step", param, master, grad, {&m, &v});
  ZT_CHECK(h.step >= 1, "adamw_step: step is 1-based, got ", h.step);
  ZT_RUN_KERNEL("adamw_step", dev, adamw_step(param, master, grad, m, v, h));
}

void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h) {
  const bool has_buf = momentum_buf.has_data();
  ZT_CHECK(has_buf == (h.momentum != 0.0f), "sgd_step: a momentum buffer is needed exactly when momentum != 0");
  const Device dev = has_buf ? check_common("sgd_step", param, master, grad, {&momentum_buf})
                             : check_common("sgd_step", param, master, grad, {});
  ZT_RUN_KERNEL("sgd_step", dev, sgd_step(param, master, grad, momentum_buf, h));
}

void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h) {
  const Device dev = check_common("lion_step", param, master, grad, {&m});
  ZT_RUN_KERNEL("lion_step", dev, lion_step(param, master, grad, m, h));
}

void adamw_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const OptimizerSegments& segments) {
  const Device dev = check_common("adamw_step_segments", param, master, grad, {&m, &v});
  ZT_CHECK(h.step >= 1, "adamw_step_segments: step is 1-based, got ", h.step);
  check_segments("adamw_step_segments", param, segments);
  ZT_RUN_KERNEL("adamw_step_segments", dev, adamw_step_segments(param, master, grad, m, v, h, segments));
}

void sgd_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, const OptimizerSegments& segments) {
  const bool has_buf = momentum_buf.has_data();
  ZT_CHECK(has_buf == (h.momentum != 0.0f),
           "sgd_step_segments: a momentum buffer is needed exactly when momentum != 0");
  const Device dev = has_buf ? check_common("sgd_step_segments", param, master, grad, {&momentum_buf})
                             : check_common("sgd_step_segments", param, master, grad, {});
  check_segments("sgd_step_segments", param, segments);
  ZT_RUN_KERNEL("sgd_step_segments", dev, sgd_step_segments(param, master, grad, momentum_buf, h, segments));
}

void lion_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const OptimizerSegments& segments) {
  const Device dev = check_common("lion_step_segments", param, master, grad, {&m});
  check_segments("lion_step_segments", param, segments);
  ZT_RUN_KERNEL("lion_step_segments", dev, lion_step_segments(param, master, grad, m, h, segments));
}

}  // namespace zt::ops
