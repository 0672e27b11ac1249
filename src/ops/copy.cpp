#include "ops/copy.h"

#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::ops {

void copy(const Tensor& dst, const Tensor& src) {
  ZT_CHECK(dst.numel() == src.numel(), "copy: ", dst.numel(), " elements from ", src.numel());
  if (dst.numel() == 0) return;
  const bool src_host = src.device().is_cpu(), dst_host = dst.device().is_cpu();
  if (src_host && dst_host) return dst.copy_from(src.shape() == dst.shape() ? src : src.reshape(dst.shape()));
  ZT_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy: device copies need contiguous tensors");
  const size_t n = static_cast<size_t>(dst.numel());
  if (!src_host && !dst_host) return cuda::convert_on_device(src.data(), src.dtype(), dst.data(), dst.dtype(), n);
  if (dst_host) {
    // Device -> host: bring the bytes over as they are, convert on the host.
    if (src.dtype() == dst.dtype()) return cuda::copy_to_host(dst.data(), src.data(), src.nbytes());
    OwnedTensor staged(dst.shape(), src.dtype());
    cuda::copy_to_host(staged->data(), src.data(), src.nbytes());
    return dst.copy_from(staged);
  }
  // Host -> device: convert on the host, send the bytes.
  if (src.dtype() == dst.dtype()) return cuda::copy_to_device(dst.data(), src.data(), src.nbytes());
  OwnedTensor staged(dst.shape(), dst.dtype());
  staged->copy_from(src.shape() == dst.shape() ? src : src.reshape(dst.shape()));
  cuda::copy_to_device(dst.data(), staged->data(), staged->nbytes());
}

}  // namespace zt::ops
