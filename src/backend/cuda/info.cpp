// versions() and device_info() of backend/cuda_api.h for the CUDA build: what
// `zerotrain report` shows about the toolkit, the driver and the GPUs.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime.h>

#include "backend/cuda/check.h"
#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cuda {

VersionInfo versions() noexcept {
  VersionInfo v;
  v.runtime_compiled = CUDART_VERSION;
  v.cublas_compiled = CUBLAS_VERSION;
  // With no driver these calls fail or report 0; a report shows that, so ignore errors.
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  cudaGetLastError();  // clear any sticky error from the queries above
  v.cublaslt = static_cast<int64_t>(cublasLtGetVersion());
  return v;
}

DeviceInfo device_info(int device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    ZT_THROW_INPUT("device cuda:", device, " does not exist: ", count, " GPU(s) visible");
  cudaDeviceProp p{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.name = p.name;
  d.total_memory = p.totalGlobalMem;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  // nvidia-smi's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
  static const char* const kHex = "0123456789abcdef";
  d.uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    const auto byte = static_cast<unsigned char>(p.uuid.bytes[i]);
    if (i == 4 || i == 6 || i == 8 || i == 10) d.uuid += '-';
    d.uuid += kHex[byte >> 4];
    d.uuid += kHex[byte & 15];
  }
  return d;
}

size_t free_device_memory() noexcept {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return 0;
  }
  return free;
}

}  // namespace zt::cuda
