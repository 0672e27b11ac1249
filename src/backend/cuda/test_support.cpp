// convert_on_device_for_test (backend/cuda_api.h): runs the conversion kernels on host data.
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cuda {

void convert_on_device_for_test(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                                size_t misalign) {
  Context& ctx = context();
  const cudaStream_t stream = ctx.compute.get();
  const size_t in_size = dtype_size(src_dtype), out_size = dtype_size(dst_dtype);
  Buffer in((n + misalign) * in_size, Device::cuda(ctx.device));
  Buffer out((n + misalign) * out_size, Device::cuda(ctx.device));
  char* d_in = static_cast<char*>(in.data()) + misalign * in_size;
  char* d_out = static_cast<char*>(out.data()) + misalign * out_size;
  if (n == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(d_in, src, n * in_size, cudaMemcpyHostToDevice, stream));
  convert_on_device(d_in, src_dtype, d_out, dst_dtype, n);
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, d_out, n * out_size, cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace zt::cuda
