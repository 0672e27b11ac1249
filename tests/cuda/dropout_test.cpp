// CUDA dropout (ops/dropout.h on device tensors) against the CPU backend. The device runs
// core/rng.h's Philox, so the mask must be the CPU's bit for bit: f32 outputs are compared
// bitwise, every kept/dropped decision is also checked against Philox::uniform(i) directly,
// and bf16 outputs must equal the CPU's f32 output rounded to bf16. Covers sizes around the
// 4-element Philox block and the 8-element chunk, seeds and streams with high 32-bit halves,
// views shifted by one element (the unaligned path), in place, backward, and p == 0.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace {

using namespace zt;
using zt::testing::make;
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
std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(f32_bits(f));
  return out;
}
int64_t first_difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

// Nonzero inputs (so a kept element is never 0), cheap to make for large n.
std::vector<float> inputs(int64_t n, float shift = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 1.0f + shift + static_cast<float>(i % 251) * 0.0173f;
  return v;
}

// Every element of y is 0 exactly where Philox drops it (inputs are nonzero).
void expect_mask(const std::vector<float>& y, float p, const Philox& rng) {
  for (size_t i = 0; i < y.size(); ++i) {
    const bool keep = rng.uniform(static_cast<uint64_t>(i)) >= p;
    ASSERT_EQ(y[i] != 0.0f, keep) << "element " << i << " uniform " << rng.uniform(static_cast<uint64_t>(i));
  }
}

const std::vector<Philox> kStreams = {Philox(0, 0), Philox(1234, 7),
                                      Philox(0x0123456789abcdefULL, 0xfedcba9876543210ULL)};

TEST(CudaDropout, F32MaskAndValuesAreBitwiseTheCpus) {
  ZT_REQUIRE_GPU();
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4097, 4 * 64 * 768})
    for (float p : {0.1f, 0.5f, 0.9f})
      for (const Philox& rng : kStreams)
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(str("n=", n, " p=", p, " seed key ", rng.key().k0, ":", rng.key().k1, " stream ", rng.stream(),
                           " offset=", offset));
          const OwnedTensor x = make(inputs(n), {n});
          OwnedTensor want({n}, DType::F32);
          ops::dropout_forward(want, x, p, rng);
          const DeviceCopy gx = on_device(x, offset);
          DeviceCopy gy = on_device(x, offset);
          ops::dropout_forward(gy, gx, p, rng);
          const std::vector<float> got = values(gy);
          ASSERT_EQ(first_difference(bits(got), bits(values(want))), -1);
          if (n <= 4097) expect_mask(got, p, rng);
        }
}

// More elements than one grid of the kernel covers (8192 x 256 threads x 8 elements).
TEST(CudaDropout, LargeTensorsTakeTheGridStrideLoop) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{8192} * 256 * 8 + 45;
  const Philox rng(99, 3);
  const OwnedTensor x = make(inputs(n), {n});
  OwnedTensor want({n}, DType::F32);
  ops::dropout_forward(want, x, 0.3f, rng);
  DeviceCopy g = on_device(x);
  ops::dropout_forward(g, g, 0.3f, rng);
  ASSERT_EQ(first_difference(bits(values(g)), bits(values(want))), -1);
}

TEST(CudaDropout, Bf16OutputIsTheCpuOutputRoundedToBf16) {
  ZT_REQUIRE_GPU();
  for (int64_t n : {1, 5, 8, 9, 33, 768 * 3 + 1, 4 * 64 * 768})
    for (int64_t offset : {0, 1})
      for (const Philox& rng : kStreams) {
        SCOPED_TRACE(str("n=", n, " offset=", offset, " stream ", rng.stream()));
        const float p = 0.2f;
        const OwnedTensor hx = make(inputs(n, 0.5f), {n}, DType::BF16);
        // The CPU runs on the bf16 values widened to f32; its output rounded to bf16 is the
        // exact expectation (one f32 multiply, one rounding).
        const OwnedTensor cx = make(hx->to_f32_vector(), {n});
        OwnedTensor cy({n}, DType::F32);
        ops::dropout_forward(cy, cx, p, rng);
        const std::vector<float> want = make(values(cy), {n}, DType::BF16)->to_f32_vector();
        const DeviceCopy gx = on_device(hx, offset);
        DeviceCopy gy = on_device(hx, offset);
        ops::dropout_forward(gy, gx, p, rng);
        ASSERT_EQ(first_difference(bits(values(gy)), bits(want)), -1);
        // Backward, in place over dout: the same mask and scale.
        ops::dropout_backward(gx, gx, p, rng);
        ASSERT_EQ(first_difference(bits(values(gx)), bits(want)), -1);
      }
}

TEST(CudaDropout, BackwardRegeneratesTheForwardMask) {
  ZT_REQUIRE_GPU();
  for (int64_t n : {3, 9, 1001, 65536 + 7})
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(str("n=", n, " offset=", offset));
      const Philox rng(7, 0x100000001ULL);
      const float p = 0.35f;
      const OwnedTensor dy = make(inputs(n, 2.0f), {n});
      OwnedTensor want({n}, DType::F32);
      ops::dropout_backward(want, dy, p, rng);
      const DeviceCopy gdy = on_device(dy, offset);
      DeviceCopy gdx = on_device(dy, offset);
      ops::dropout_backward(gdx, gdy, p, rng);
      const std::vector<float> got = values(gdx);
      ASSERT_EQ(first_difference(bits(got), bits(values(want))), -1);
      expect_mask(got, p, rng);
      // In place (dinp == dout).
      DeviceCopy inplace = on_device(dy, offset);
      ops::dropout_backward(inplace, inplace, p, rng);
      ASSERT_EQ(first_difference(bits(values(inplace)), bits(got)), -1);
    }
}

// An element whose uniform equals p exactly is kept (uniform >= p): p is taken from the
// stream itself, which random inputs would hit only once in 2^24 elements.
TEST(CudaDropout, UniformEqualToPIsKept) {
  ZT_REQUIRE_GPU();
  const int64_t n = 1003;
  for (const Philox& rng : kStreams)
    for (int64_t at : {0, 5, 13, 1000, 1002})
      for (int64_t offset : {0, 1}) {
        const float p = rng.uniform(static_cast<uint64_t>(at));
        SCOPED_TRACE(str("element ", at, " p=", p, " stream ", rng.stream(), " offset=", offset));
        const OwnedTensor x = make(inputs(n), {n});
        OwnedTensor want({n}, DType::F32);
        ops::dropout_forward(want, x, p, rng);
        DeviceCopy g = on_device(x, offset);
        ops::dropout_forward(g, g, p, rng);
        const std::vector<float> got = values(g);
        ASSERT_NE(got[static_cast<size_t>(at)], 0.0f);
        ASSERT_EQ(first_difference(bits(got), bits(values(want))), -1);
        expect_mask(got, p, rng);
      }
}

TEST(CudaDropout, ZeroProbabilityCopies) {
  ZT_REQUIRE_GPU();
  const Philox rng(5, 5);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t n : {1, 9, 4099}) {
      const OwnedTensor x = make(inputs(n), {n}, dt);
      const DeviceCopy gx = on_device(x, 1);
      DeviceCopy gy = on_device(make(std::vector<float>(static_cast<size_t>(n), 0.0f), {n}, dt));
      ops::dropout_forward(gy, gx, 0.0f, rng);
      EXPECT_EQ(values(gy), x->to_f32_vector()) << dtype_name(dt) << " n=" << n;
      ops::dropout_forward(gx, gx, 0.0f, rng);  // in place: nothing to do
      EXPECT_EQ(values(gx), x->to_f32_vector()) << dtype_name(dt) << " n=" << n;
    }
}

}  // namespace
