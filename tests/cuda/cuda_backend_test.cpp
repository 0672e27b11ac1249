// CUDA backend: allocator reuse and statistics, device conversions against core/dtype.h.
// Uses only backend/cuda_api.h (no CUDA headers), so it builds in every configuration.
// Without a GPU the device tests report themselves skipped; the API's behaviour without a
// GPU is tested instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda_api.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace {

using zt::Buffer;
using zt::Device;
using zt::DType;

#define ZT_REQUIRE_GPU()                                          \
  do {                                                            \
    if (!zt::cuda::available()) GTEST_SKIP() << "no GPU visible"; \
    zt::cuda::init(0);                                            \
  } while (0)

TEST(CudaApi, WithoutGpuNothingPretendsToWork) {
  if (zt::cuda::available()) GTEST_SKIP() << "a GPU is visible";
  EXPECT_EQ(zt::cuda::device_count(), 0);
  EXPECT_FALSE(zt::cuda::initialized());
  EXPECT_EQ(zt::cuda::current_device(), -1);
  try {
    zt::cuda::init(0);
    FAIL() << "init succeeded without a GPU";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
  }
  EXPECT_EQ(zt::cuda::bytes_in_use(), 0u);
  EXPECT_EQ(zt::cuda::peak_bytes(), 0u);
  EXPECT_EQ(zt::cuda::bytes_reserved(), 0u);
  EXPECT_THROW(Buffer(16, Device::cuda()), zt::Error);
  float x = 1.f;
  zt::bf16 y;
  EXPECT_THROW(zt::cuda::convert_on_device_for_test(&x, DType::F32, &y, DType::BF16, 1), zt::Error);
}

TEST(CudaApi, InitIsIdempotentAndChecksTheDevice) {
  ZT_REQUIRE_GPU();
  EXPECT_TRUE(zt::cuda::initialized());
  EXPECT_EQ(zt::cuda::current_device(), 0);
  EXPECT_NO_THROW(zt::cuda::init(0));
  EXPECT_THROW(zt::cuda::init(zt::cuda::device_count()), zt::Error);
}

TEST(CudaAllocator, ReusesFreedBlocksWithoutDeviceMalloc) {
  ZT_REQUIRE_GPU();
  const auto before = zt::cuda::memory_stats();
  void* first = nullptr;
  {
    Buffer a(1000, Device::cuda());
    first = a.data();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 256, 0u);
    // 1000 bytes is in the 1024-byte size class.
    EXPECT_EQ(zt::cuda::bytes_in_use(), before.bytes_in_use + 1024);
  }
  EXPECT_EQ(zt::cuda::bytes_in_use(), before.bytes_in_use);
  const auto after_first = zt::cuda::memory_stats();
  {
    Buffer b(900, Device::cuda());  // same size class: the cached block comes back
    EXPECT_EQ(b.data(), first);
  }
  const auto after_second = zt::cuda::memory_stats();
  EXPECT_EQ(after_second.device_mallocs, after_first.device_mallocs);
  EXPECT_EQ(after_second.bytes_reserved, after_first.bytes_reserved);
  EXPECT_EQ(after_second.device_frees, after_first.device_frees);
}

TEST(CudaAllocator, SteadyStateLoopDoesNotCallTheDriver) {
  ZT_REQUIRE_GPU();
  const std::vector<size_t> sizes = {4, 512, 513, 70'000, 3 << 20, 5 << 20, 100 << 20};
  auto step = [&] {
    std::vector<Buffer> live;
    for (size_t s : sizes) live.emplace_back(s, Device::cuda());
    for (auto& b : live) b.zero();
  };
  step();
  const auto warm = zt::cuda::memory_stats();
  for (int i = 0; i < 5; ++i) step();
  zt::cuda::synchronize();
  const auto end = zt::cuda::memory_stats();
  EXPECT_EQ(end.device_mallocs, warm.device_mallocs);
  EXPECT_EQ(end.device_frees, warm.device_frees);
  EXPECT_EQ(end.bytes_reserved, warm.bytes_reserved);
  EXPECT_EQ(end.bytes_in_use, warm.bytes_in_use);
  EXPECT_GE(end.peak_bytes, end.bytes_in_use + (100u << 20));
}

TEST(CudaAllocator, PeakResetAndEmptyCache) {
  ZT_REQUIRE_GPU();
  { Buffer big(64 << 20, Device::cuda()); }
  EXPECT_GE(zt::cuda::peak_bytes(), size_t{64} << 20);
  zt::cuda::reset_peak_bytes();
  EXPECT_EQ(zt::cuda::peak_bytes(), zt::cuda::bytes_in_use());
  const size_t reserved = zt::cuda::bytes_reserved();
  zt::cuda::empty_cache();
  EXPECT_LE(zt::cuda::bytes_reserved() + (64u << 20), reserved);
  EXPECT_EQ(zt::cuda::bytes_reserved(), zt::cuda::bytes_in_use());
}

TEST(CudaAllocator, ZeroAndCopies) {
  ZT_REQUIRE_GPU();
  const size_t n = 1000;
  std::vector<float> host(n, 3.f), back(n, -1.f);
  Buffer buf(n * sizeof(float), Device::cuda());
  zt::cuda::copy_to_device(buf.data(), host.data(), n * sizeof(float));
  zt::cuda::copy_to_host(back.data(), buf.data(), n * sizeof(float));
  EXPECT_EQ(back, host);
  buf.zero();
  zt::cuda::copy_to_host(back.data(), buf.data(), n * sizeof(float));
  EXPECT_EQ(back, std::vector<float>(n, 0.f));
}

TEST(CudaAllocator, PinnedHostMemory) {
  ZT_REQUIRE_GPU();
  zt::Allocator& pinned = zt::cuda::pinned_host_allocator();
  EXPECT_TRUE(pinned.device().is_cpu());
  void* p = pinned.allocate(1 << 20);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 1 << 20);
  pinned.zero(p, 1 << 20);
  EXPECT_EQ(static_cast<unsigned char*>(p)[12345], 0);
  pinned.deallocate(p, 1 << 20);
}

// Inputs that exercise rounding: specials, ties, f16 subnormals and overflow, random values.
std::vector<float> conversion_inputs(size_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f,
                          -0.f,
                          1.f,
                          -1.f,
                          inf,
                          -inf,
                          std::nanf(""),
                          -std::nanf(""),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          65504.f,
                          65519.f,
                          65520.f,
                          6.0e-8f,
                          2.9e-8f,
                          3.0e-8f,
                          6.1e-5f,
                          1.00390625f,
                          1.01171875f,
                          zt::bits_f32(0x3f808000u),
                          zt::bits_f32(0x3f818000u),
                          zt::bits_f32(0x7f7fffffu),
                          zt::bits_f32(0x7fa00001u)};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal(0.f, 10.f);
  while (v.size() < n) v.push_back(v.size() % 2 ? normal(rng) : zt::bits_f32(bits(rng)));
  v.resize(n);
  return v;
}

class CudaConvert : public ::testing::TestWithParam<std::tuple<size_t, size_t>> {};

TEST_P(CudaConvert, MatchesCoreConversions) {
  ZT_REQUIRE_GPU();
  const auto [n, misalign] = GetParam();
  const std::vector<float> x = conversion_inputs(n);

  std::vector<zt::bf16> got_bf16(n);
  zt::cuda::convert_on_device_for_test(x.data(), DType::F32, got_bf16.data(), DType::BF16, n, misalign);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got_bf16[i].bits, zt::to_bf16(x[i]).bits) << "f32->bf16 of " << x[i] << " at " << i;

  std::vector<float> back(n);
  zt::cuda::convert_on_device_for_test(got_bf16.data(), DType::BF16, back.data(), DType::F32, n, misalign);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(zt::f32_bits(back[i]), zt::f32_bits(zt::to_f32(got_bf16[i]))) << "bf16->f32 at " << i;

  std::vector<zt::f16> got_f16(n);
  zt::cuda::convert_on_device_for_test(x.data(), DType::F32, got_f16.data(), DType::F16, n, misalign);
  for (size_t i = 0; i < n; ++i) {
    const zt::f16 want = zt::to_f16(x[i]);
    if (std::isnan(x[i]))  // NaN payloads differ; NaN-ness must not
      ASSERT_TRUE(std::isnan(zt::to_f32(got_f16[i]))) << "f32->f16 of NaN at " << i;
    else
      ASSERT_EQ(got_f16[i].bits, want.bits) << "f32->f16 of " << x[i] << " at " << i;
  }

  zt::cuda::convert_on_device_for_test(got_f16.data(), DType::F16, back.data(), DType::F32, n, misalign);
  for (size_t i = 0; i < n; ++i) {
    const float want = zt::to_f32(got_f16[i]);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(back[i])) << "f16->f32 at " << i;
    else
      ASSERT_EQ(zt::f32_bits(back[i]), zt::f32_bits(want)) << "f16->f32 at " << i;
  }
}

// Sizes around the 8-element vector width; misalign 1 forces the scalar path.
INSTANTIATE_TEST_SUITE_P(Sizes, CudaConvert,
                         ::testing::Combine(::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9},
                                                              size_t{4099}, size_t{1} << 20),
                                            ::testing::Values(size_t{0}, size_t{1})));

}  // namespace
