#include "backend/cuda/check.h"

#include "core/error.h"
#include "core/log.h"

namespace zt::cuda {
namespace {

ErrorKind kind_of(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return ErrorKind::Io;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
      return ErrorKind::Unsupported;
    default:
      return ErrorKind::Internal;
  }
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky-free error so later calls do not report it again
  throw Error(kind_of(err), str("CUDA call failed: ", call, " returned ", cudaGetErrorName(err), " (",
                                cudaGetErrorString(err), ") at ", file, ":", line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::Io : ErrorKind::Internal,
              str("cuBLAS call failed: ", call, " returned ", cublasGetStatusName(status), " (",
                  cublasGetStatusString(status), ") at ", file, ":", line));
}

void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept {
  // At process exit the runtime may already be gone; nothing useful to say then.
  if (err == cudaErrorCudartUnloading) return;
  try {
    ZT_WARN("CUDA call failed: ", call, " returned ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ",
            file, ":", line);
  } catch (...) {
  }
}

}  // namespace zt::cuda
