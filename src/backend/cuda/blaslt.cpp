#include "backend/cuda/blaslt.h"

#include "backend/cuda/check.h"

namespace zt::cuda {

BlasLtHandle::BlasLtHandle(Allocator& device_allocator, size_t workspace_bytes)
    : workspace_(workspace_bytes, device_allocator) {
  ZT_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

BlasLtHandle::~BlasLtHandle() {
  if (handle_) cublasLtDestroy(handle_);
}

}  // namespace zt::cuda
