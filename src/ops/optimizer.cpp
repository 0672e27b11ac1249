#include "ops/optimizer.h"

#include "backend/cpu/optimizer.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h) {
  const int64_t n = param.numel();
  ZT_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, "adamw_step: sizes differ for ", param.name());
  ZT_CHECK(m.dtype() == DType::F32 && v.dtype() == DType::F32, "adamw_step: moments must be f32");
  const bool has_master = master.data() != nullptr;
  if (has_master) ZT_CHECK(master.dtype() == DType::F32 && master.numel() == n, "adamw_step: master must be f32");
  else ZT_CHECK(param.dtype() == DType::F32, "adamw_step: a 16-bit parameter needs an f32 master copy");
  const Device dev = common_device("adamw_step", {&param, &master, &grad, &m, &v});
  if (!dev.is_cpu()) no_kernel("adamw_step", dev);
  dispatch_float(param.dtype(), [&](auto ptag) {
    dispatch_float(grad.dtype(), [&](auto gtag) {
      using P = decltype(ptag);
      using G = decltype(gtag);
      cpu::adamw_step<P, G>(static_cast<P*>(param.data()), has_master ? static_cast<float*>(master.data()) : nullptr,
                            static_cast<const G*>(grad.data()), static_cast<float*>(m.data()),
                            static_cast<float*>(v.data()), n, h);
    });
  });
}

}  // namespace zt::ops
