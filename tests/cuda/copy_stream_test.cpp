// cuda::CopyStream / CopyEvent / HostRegistration (backend/cuda_api.h): the copy stream
// ZeRO-Offload streams through. Ordering both ways against the compute stream (the tests
// fail if a copy runs ahead of the work it waits for), pinned-in-place host memory, and the
// overlap of copies with compute printed (not asserted: the GPU's copy engines decide it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;

#define ZT_REQUIRE_GPU()                                          \
  do {                                                            \
    if (!zt::cuda::available()) GTEST_SKIP() << "no GPU visible"; \
    zt::cuda::init(0);                                            \
  } while (0)

// Page-aligned host memory, registered (pinned) for its lifetime.
struct PinnedFloats {
  explicit PinnedFloats(size_t n)
      : bytes((n * sizeof(float) + 4095) / 4096 * 4096),
        data(static_cast<float*>(std::aligned_alloc(4096, bytes))),
        registration(data, bytes) {}
  ~PinnedFloats() { std::free(data); }
  size_t bytes;
  float* data;
  zt::cuda::HostRegistration registration;
};

TEST(CudaCopyStream, WithoutGpuItSaysSo) {
  if (zt::cuda::available()) GTEST_SKIP() << "a GPU is visible";
  EXPECT_THROW(zt::cuda::CopyStream(), zt::Error);
  float x = 0;
  EXPECT_THROW(zt::cuda::HostRegistration(&x, sizeof x), zt::Error);
  const zt::cuda::CopyEvent never_recorded;
  EXPECT_TRUE(never_recorded.done());
}

// 50 adds on the compute stream (tens of ms), then a copy to the host on the copy stream:
// the copy must see the last add's result, not an earlier one.
TEST(CudaCopyStream, ToHostWaitsForTheComputeWorkQueuedBeforeIt) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{1} << 26;  // 256 MiB of f32
  OwnedTensor acc({n}, DType::F32, Device::cuda()), one({n}, DType::F32, Device::cuda());
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  zt::cuda::copy_to_device(one->data(), ones.data(), ones.size() * sizeof(float));
  acc->zero();
  PinnedFloats host(static_cast<size_t>(n));
  zt::cuda::CopyStream copies;
  for (int i = 0; i < 50; ++i) zt::ops::add_inplace(acc, one);
  copies.wait_for_compute();
  copies.to_host(host.data, acc->data(), static_cast<size_t>(n) * sizeof(float));
  const zt::cuda::CopyEvent copied = copies.record();
  copied.wait();
  EXPECT_TRUE(copied.done());
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += host.data[i] != 50.0f;
  EXPECT_EQ(wrong, 0) << "first value " << host.data[0];
}

// A copy to the device, then compute ordered after its event (no host wait): the compute
// reads the copied values.
TEST(CudaCopyStream, ComputeOrderedAfterTheEventSeesTheCopy) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{1} << 26;
  PinnedFloats host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host.data[i] = static_cast<float>(i % 1000);
  OwnedTensor x({n}, DType::F32, Device::cuda()), y({n}, DType::F32, Device::cuda());
  x->zero();
  y->zero();
  zt::cuda::CopyStream copies;
  copies.wait_for_compute();  // after the zero fill
  copies.to_device(x->data(), host.data, static_cast<size_t>(n) * sizeof(float));
  copies.record().order_compute_after();
  zt::ops::add_inplace(y, x);  // y = x, on the compute stream
  std::vector<float> back(static_cast<size_t>(n));
  zt::cuda::copy_to_host(back.data(), y->data(), back.size() * sizeof(float));
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += back[static_cast<size_t>(i)] != static_cast<float>(i % 1000);
  EXPECT_EQ(wrong, 0);
}

TEST(CudaCopyStream, HostRegistrationTakesExactSizesAndZeroBytes) {
  ZT_REQUIRE_GPU();
  // Not a power of two, not a page multiple: registered as it is.
  std::vector<float> odd(1000003);
  zt::cuda::HostRegistration reg(odd.data(), odd.size() * sizeof(float));
  EXPECT_EQ(reg.bytes(), odd.size() * sizeof(float));
  zt::cuda::HostRegistration none(nullptr, 0);
  EXPECT_EQ(none.bytes(), 0u);
}

// How much of a device-to-host copy hides under compute on this GPU (printed).
TEST(CudaCopyStream, CopiesOverlapCompute) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{1} << 27;  // 512 MiB
  OwnedTensor acc({n}, DType::F32, Device::cuda()), one({n}, DType::F32, Device::cuda()),
      src({n}, DType::F32, Device::cuda());
  acc->zero();
  one->zero();
  src->zero();
  PinnedFloats host(static_cast<size_t>(n));
  zt::cuda::CopyStream copies;
  auto seconds = [](auto&& work) {
    zt::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    work();
    zt::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto compute = [&] {
    for (int i = 0; i < 40; ++i) zt::ops::add_inplace(acc, one);
  };
  auto copy = [&] {
    copies.to_host(host.data, src->data(), static_cast<size_t>(n) * sizeof(float));
    copies.synchronize();
  };
  (void)seconds([&] { copy(); });  // warm-up
  const double t_compute = seconds(compute), t_copy = seconds(copy);
  const double t_both = seconds([&] {
    copies.to_host(host.data, src->data(), static_cast<size_t>(n) * sizeof(float));
    compute();
    copies.synchronize();
  });
  std::printf(
      "[copy stream] compute %.1f ms, 512 MiB to host %.1f ms (%.1f GB/s), both %.1f ms (serial would be %.1f)\n",
      1e3 * t_compute, 1e3 * t_copy, static_cast<double>(n) * 4 / t_copy / 1e9, 1e3 * t_both,
      1e3 * (t_compute + t_copy));
  EXPECT_LT(t_both, t_compute + t_copy + 0.005);
}

}  // namespace
