// CUDA pointwise helpers (ops/elementwise.h on device tensors) against the CPU backend.
// add, add_inplace and scale_inplace are one f32 operation per element and one rounding,
// so the GPU must reproduce the CPU bit for bit in every dtype (and dtype pair);
// sum_of_squares must agree to double rounding, all_finite exactly; the device-side
// SumOfSquares accumulator must equal the host loop over the device's sum_of_squares bit
// for bit, and be non-finite exactly when an element is. Sizes cover the
// 8-element chunk (1, 7, 8, 9, ...), the model widths (768, 1600, 2048), the grid-stride
// loops, and views shifted by one element (the unaligned element-by-element path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace {

using namespace zt;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_host;

// A device copy of a contiguous host tensor, `offset` elements past the start of its own
// (256-byte aligned) allocation: offset 1 misaligns every 16-byte vector.
struct DeviceCopy {
  OwnedTensor storage;
  Tensor view;
  operator const Tensor&() const { return view; }
};
DeviceCopy on_device(const Tensor& host, int64_t offset = 0) {
  DeviceCopy d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* base = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(dtype_size(host.dtype()));
  cuda::copy_to_device(base, host.data(), host.nbytes());
  d.view = Tensor(base, host.shape(), host.dtype(), Device::cuda(), host.name());
  return d;
}
std::vector<float> values(const Tensor& t) {
  return t.device().is_cuda() ? to_host(t)->to_f32_vector() : t.to_f32_vector();
}

// Bit patterns of the values (f32 widening is exact for bf16/f16), for bitwise comparisons.
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float f : values(t)) out.push_back(f32_bits(f));
  return out;
}

// Index of the first differing element, or -1.
int64_t first_difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};
const std::vector<int64_t> kSizes = {1, 2, 7, 8, 9, 31, 33, 768, 1600, 2048 * 3 + 5, 123457};

std::string case_name(DType dt, int64_t n, int64_t offset) { return str(dtype_name(dt), " n=", n, " offset=", offset); }

TEST(CudaElementwise, AddIsBitwiseTheCpuAdd) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes)
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(case_name(dt, n, offset));
        OwnedTensor a = make(randn(n, seed++, 3.0f), {n}, dt), b = make(randn(n, seed++), {n}, dt);
        OwnedTensor want({n}, dt);
        ops::add(want, a, b);
        DeviceCopy da = on_device(a, offset), db = on_device(b, offset), dout = on_device(a, offset);
        ops::add(dout, da, db);
        ASSERT_EQ(first_difference(bits(dout), bits(want)), -1);
        // out aliasing a, then b (the residual stream adds in place).
        ops::add(da, da, db);
        ASSERT_EQ(first_difference(bits(da), bits(want)), -1);
        DeviceCopy da2 = on_device(a, offset);
        ops::add(db, da2, db);
        ASSERT_EQ(first_difference(bits(db), bits(want)), -1);
      }
}

TEST(CudaElementwise, AddInplaceAccumulatesBitwiseForEveryDtypePair) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType acc_dt : kFloatTypes)
    for (DType x_dt : kFloatTypes)
      for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{1600}, int64_t{4099}, int64_t{70001}})
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(str("acc ", dtype_name(acc_dt), " x ", dtype_name(x_dt), " n=", n, " offset=", offset));
          // acc holds earlier gradients: the result must be old + new.
          OwnedTensor acc = make(randn(n, seed++), {n}, acc_dt), x = make(randn(n, seed++, 0.5f), {n}, x_dt);
          DeviceCopy dacc = on_device(acc, offset), dx = on_device(x, offset);
          ops::add_inplace(acc, x);
          ops::add_inplace(dacc, dx);
          ASSERT_EQ(first_difference(bits(dacc), bits(acc)), -1);
          ops::add_inplace(acc, x);  // a second accumulation on top of the first
          ops::add_inplace(dacc, dx);
          ASSERT_EQ(first_difference(bits(dacc), bits(acc)), -1);
        }
}

TEST(CudaElementwise, ScaleInplaceIsBitwiseTheCpuScale) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes)
      for (int64_t offset : {0, 1})
        for (float alpha : {0.5f, -1.7f, 1.0f / 3.0f}) {
          SCOPED_TRACE(case_name(dt, n, offset) + str(" alpha=", alpha));
          OwnedTensor x = make(randn(n, seed++, 2.0f), {n}, dt);
          DeviceCopy dx = on_device(x, offset);
          ops::scale_inplace(x, alpha);
          ops::scale_inplace(dx, alpha);
          ASSERT_EQ(first_difference(bits(dx), bits(x)), -1);
        }
}

// More elements than one grid of the chunked kernel covers (8192 blocks x 256 threads x 8),
// so the grid-stride loop runs a second round; cheap deterministic values instead of randn.
TEST(CudaElementwise, LargeTensorsTakeTheGridStrideLoop) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{8192} * 256 * 8 + 1237;
  std::vector<float> va(static_cast<size_t>(n)), vb(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    va[static_cast<size_t>(i)] = static_cast<float>(i % 1013) * 0.01f - 5.0f;
    vb[static_cast<size_t>(i)] = static_cast<float>(i % 977) * -0.003f + 1.0f;
  }
  OwnedTensor a = make(va, {n}, DType::BF16), b = make(vb, {n}, DType::BF16);
  DeviceCopy da = on_device(a), db = on_device(b);
  ops::add_inplace(a, b);
  ops::add_inplace(da, db);
  ASSERT_EQ(first_difference(bits(da), bits(a)), -1);
  ops::scale_inplace(a, 0.25f);
  ops::scale_inplace(da, 0.25f);
  ASSERT_EQ(first_difference(bits(da), bits(a)), -1);
  const double want = ops::sum_of_squares(a), got = ops::sum_of_squares(da);
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_TRUE(ops::all_finite(da));
}

TEST(CudaElementwise, SumOfSquaresMatchesTheCpuInDouble) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 300;
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(50304);             // a GPT-2 vocabulary row
  sizes.push_back(int64_t{1} << 22);  // past one grid of the reduction (1024 x 256 x 8)
  for (DType dt : kFloatTypes)
    for (int64_t n : sizes)
      for (int64_t offset : {0, 1}) {
        if (n > (1 << 20) && offset) continue;  // keep the test fast: the large case once per dtype
        SCOPED_TRACE(case_name(dt, n, offset));
        OwnedTensor x = make(randn(n, seed++, 1e-2f), {n}, dt);
        const DeviceCopy dx = on_device(x, offset);
        const double want = ops::sum_of_squares(x);
        const double got = ops::sum_of_squares(dx);
        ASSERT_TRUE(std::isfinite(got));
        // Both sum the same double squares; only the order of the additions differs.
        ASSERT_NEAR(got, want, 1e-12 * want);
        // A fixed grid and a fixed reduction order: the same value on every call.
        ASSERT_EQ(ops::sum_of_squares(dx), got);
      }
}

TEST(CudaElementwise, SumOfSquaresAccumulatorIsTheHostLoopBitwise) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 350;
  std::vector<OwnedTensor> hosts;
  std::vector<DeviceCopy> devs;
  for (DType dt : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{2048}, int64_t{300007}})
      for (int64_t offset : {0, 1}) {
        hosts.push_back(make(randn(n, seed++, 1e-2f), {n}, dt));
        devs.push_back(on_device(hosts.back(), offset));
      }
  ops::SumOfSquares acc(Device::cuda());
  double want = 0.0;
  for (const DeviceCopy& d : devs) {
    acc.add(d);
    want += ops::sum_of_squares(d);
  }
  const double got = acc.value();
  EXPECT_EQ(got, want);
  EXPECT_EQ(acc.value(), got);  // reading again changes nothing
  // The same tensors on the CPU: the same sums up to the order of additions.
  ops::SumOfSquares cpu(Device::cpu());
  for (const OwnedTensor& h : hosts) cpu.add(h);
  EXPECT_NEAR(got, cpu.value(), 1e-12 * cpu.value());
  EXPECT_TRUE(std::isfinite(got));
  // One inf or nan anywhere (here in the last tensor, after large finite values) shows.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const OwnedTensor huge = make(std::vector<float>(1000, 3e38f), {1000}, DType::F32);
  for (DType dt : kFloatTypes)
    for (float bad : {inf, -inf, nan}) {
      std::vector<float> v = randn(777, seed++, 1.0f);
      v[500] = bad;
      ops::SumOfSquares s(Device::cuda());
      s.add(on_device(huge));
      s.add(on_device(make(v, {777}, dt), 1));
      EXPECT_FALSE(std::isfinite(s.value())) << dtype_name(dt) << " " << bad;
    }
  ops::SumOfSquares fine(Device::cuda());
  fine.add(on_device(huge));
  EXPECT_TRUE(std::isfinite(fine.value()));
  // A host tensor is refused by a device accumulator.
  EXPECT_THROW(fine.add(hosts.back()), Error);
}

TEST(CudaElementwise, SumOfSquaresKeepsDoubleRangeForLargeValues) {
  ZT_REQUIRE_GPU();
  // 3e38^2 overflows f32 but not double: the device must square in double as the CPU does.
  const int64_t n = 1001;
  OwnedTensor x = make(std::vector<float>(static_cast<size_t>(n), 3e38f), {n}, DType::F32);
  const double got = ops::sum_of_squares(on_device(x));
  EXPECT_NEAR(got, 1001.0 * 9e76, 1e-6 * 1001.0 * 9e76);
}

TEST(CudaElementwise, AllFiniteFindsEveryInfAndNan) {
  ZT_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  uint32_t seed = 400;
  for (DType dt : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{2048}, int64_t{100003}})
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(case_name(dt, n, offset));
        std::vector<float> v = randn(n, seed++, 100.0f);
        {
          const OwnedTensor x = make(v, {n}, dt);
          ASSERT_TRUE(ops::all_finite(x));
          ASSERT_TRUE(ops::all_finite(on_device(x, offset)));
        }
        // One bad value at the start, in the middle (a vector lane), and in the tail chunk.
        for (int64_t pos : {int64_t{0}, n / 2, n - 1})
          for (float bad : {inf, -inf, nan}) {
            std::vector<float> w = v;
            w[static_cast<size_t>(pos)] = bad;
            const OwnedTensor x = make(w, {n}, dt);
            ASSERT_FALSE(ops::all_finite(x)) << "CPU, pos " << pos;
            ASSERT_FALSE(ops::all_finite(on_device(x, offset))) << "pos " << pos << " value " << bad;
          }
      }
  // A finite f32 that overflows to inf when stored as f16.
  const OwnedTensor big = make({1.0f, 7e4f, 2.0f}, {3}, DType::F16);
  EXPECT_FALSE(ops::all_finite(on_device(big)));
}

}  // namespace
