// Error checks for CUDA runtime and cuBLAS/cuBLASLt calls. A failure throws zt::Error whose
// message names the failing call, the error code and its description, and file:line:
//   ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
//   ZT_CUDA_CHECK_LAST();             // after a kernel launch
//   ZT_CUBLAS_CHECK(cublasLtMatmul(...));
// Out of memory throws ErrorKind::Io, no usable GPU/driver ErrorKind::Unsupported, anything
// else ErrorKind::Internal. ZT_CUDA_WARN is for destructors: it logs and never throws.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace zt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept;

}  // namespace zt::cuda

#define ZT_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                      \
    const cudaError_t zt_cuda_err_ = (call);                                                                \
    if (zt_cuda_err_ != cudaSuccess) ::zt::cuda::throw_cuda_error(zt_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks for a launch error of the kernel just launched (does not synchronize).
#define ZT_CUDA_CHECK_LAST() ZT_CUDA_CHECK(cudaGetLastError())

#define ZT_CUBLAS_CHECK(call)                                                   \
  do {                                                                          \
    const cublasStatus_t zt_cublas_st_ = (call);                                \
    if (zt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::zt::cuda::throw_cublas_error(zt_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define ZT_CUDA_WARN(call)                                                                                 \
  do {                                                                                                     \
    const cudaError_t zt_cuda_err_ = (call);                                                               \
    if (zt_cuda_err_ != cudaSuccess) ::zt::cuda::warn_cuda_error(zt_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)
