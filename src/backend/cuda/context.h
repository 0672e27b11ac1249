// The CUDA backend's per-process state, for code inside src/backend/cuda (it has CUDA
// types; everything else uses backend/cuda_api.h). One GPU per process: init(device) in
// cuda_api.h creates it, and it lives until the process exits (never destroyed, so no CUDA
// call runs during static destruction, after the runtime may be gone).
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blaslt.h"
#include "backend/cuda/stream.h"

namespace zt::cuda {

struct Context {
  explicit Context(int device);

  int device;
  cudaDeviceProp props{};
  Stream compute;  // the default compute stream: kernels, memsets and allocator frees
  CachingDeviceAllocator allocator;
  BlasLtHandle blaslt;  // after `allocator`: its workspace comes from it
};

// The context made by init(); throws Unsupported when init() has not run.
Context& context();
inline cudaStream_t compute_stream() { return context().compute.get(); }
inline cublasLtHandle_t blaslt_handle() { return context().blaslt.get(); }

}  // namespace zt::cuda
