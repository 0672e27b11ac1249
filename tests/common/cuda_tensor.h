// GPU test helpers (tests/cuda): skip without a GPU, and move tensors between host and
// device through backend/cuda_api.h (no CUDA headers: these build in every configuration).
#pragma once
#include <gtest/gtest.h>

#include "backend/cuda_api.h"
#include "core/tensor.h"

// Reports the test as skipped when no GPU is visible; otherwise makes sure the backend is
// initialised on GPU 0.
#define ZT_REQUIRE_GPU()                                            \
  do {                                                              \
    if (!::zt::cuda::available()) GTEST_SKIP() << "no GPU visible"; \
    ::zt::cuda::init(0);                                            \
  } while (0)

namespace zt::testing {

// A contiguous device copy of a contiguous host tensor (same shape and dtype).
inline OwnedTensor to_device(const Tensor& host) {
  OwnedTensor d(host.shape(), host.dtype(), Device::cuda());
  if (host.nbytes()) cuda::copy_to_device(d->data(), host.data(), host.nbytes());
  return d;
}

// A contiguous host copy of a contiguous device tensor (waits for the queued work).
inline OwnedTensor to_host(const Tensor& device) {
  OwnedTensor h(device.shape(), device.dtype());
  if (device.nbytes()) cuda::copy_to_host(h->data(), device.data(), device.nbytes());
  return h;
}

}  // namespace zt::testing
