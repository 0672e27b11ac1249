// Owner of a cuBLASLt handle and its workspace (device memory from the caching allocator).
// cuBLASLt matmuls take the workspace explicitly: pass workspace()/workspace_bytes() to
// cublasLtMatmul and CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES to the heuristic query.
#pragma once
#include <cublasLt.h>

#include <cstddef>

#include "core/allocator.h"

namespace zt::cuda {

class BlasLtHandle {
 public:
  // 32 MiB: what cuBLAS recommends for Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  explicit BlasLtHandle(Allocator& device_allocator, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~BlasLtHandle();
  BlasLtHandle(const BlasLtHandle&) = delete;
  BlasLtHandle& operator=(const BlasLtHandle&) = delete;

  cublasLtHandle_t get() const { return handle_; }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  cublasLtHandle_t handle_ = nullptr;
  Buffer workspace_;
};

}  // namespace zt::cuda
