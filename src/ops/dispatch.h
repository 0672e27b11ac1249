// Device dispatch helpers shared by the op wrappers.
#pragma once
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"

namespace zt::ops {

// The device all defined tensors live on; a mix of devices is a bug.
inline Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  bool found = false;
  Device dev;
  for (const Tensor* t : tensors) {
    if (!t->defined() || t->data() == nullptr) continue;
    if (!found) {
      dev = t->device();
      found = true;
    } else {
      ZT_CHECK(t->device() == dev, op, ": tensors on ", dev.name(), " and ", t->device().name());
    }
  }
  return dev;
}

// The activation dtypes the backends take: f32 everywhere, bf16 and f16 on CUDA
// (src/ops/README.md).
inline bool is_activation_dtype(const Tensor& t) {
  return t.dtype() == DType::F32 || ((t.dtype() == DType::BF16 || t.dtype() == DType::F16) && t.device().is_cuda());
}

[[noreturn]] inline void no_kernel(const char* op, Device dev) {
  ZT_THROW_UNSUPPORTED(op, " has no kernel for device ", dev.name(), " in this build");
}

}  // namespace zt::ops

// Runs a kernel call written once, e.g. ZT_RUN_KERNEL(op, dev, gelu_forward(out, inp)), in
// the backend of `dev` (cuda:: or cpu::, both declared from the family's kernel list in
// backend/X_kernels.h) after the op has checked its tensors; its value is the kernel's.
// Another device has no kernel in this build.
#define ZT_RUN_KERNEL(op, dev, call)                    \
  ([&]() -> decltype(auto) {                            \
    if ((dev).is_cuda()) return ::zt::cuda::call;       \
    if (!(dev).is_cpu()) ::zt::ops::no_kernel(op, dev); \
    return ::zt::cpu::call;                             \
  }())
