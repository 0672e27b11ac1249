// ops/fp8.h on the GPU against the CPU backend, bit for bit: all 256 codes of each format
// decode (dequantize, scale 1 and others, into f32 / bf16 / f16), every midpoint between
// neighbouring codes and its f32 neighbours encode (both saturations, scales), random
// values from f32 / bf16 / f16 inputs, views shifted by one element (the unaligned path),
// sizes around the 8-element chunk and beyond one grid; amax (NaN wins); and ops::copy's
// device conversions between compute dtypes and fp8 (torch's cast) and between the formats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/copy.h"
#include "ops/fp8.h"

namespace {

using namespace zt;
using zt::testing::make;
using zt::testing::to_device;
using zt::testing::to_host;

const DType kFp8[] = {DType::F8E4M3, DType::F8E5M2};
const DType kWide[] = {DType::F32, DType::BF16, DType::F16};
const Saturation kSats[] = {Saturation::Saturate, Saturation::NonSaturating};

// A device copy of a host tensor `offset` elements past the start of its allocation.
struct DeviceCopy {
  OwnedTensor storage;
  Tensor view;
  operator const Tensor&() const { return view; }
};
DeviceCopy on_device(const Tensor& host, int64_t offset = 0) {
  DeviceCopy d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* base = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(dtype_size(host.dtype()));
  if (host.nbytes()) cuda::copy_to_device(base, host.data(), host.nbytes());
  d.view = Tensor(base, host.shape(), host.dtype(), Device::cuda(), host.name());
  return d;
}
DeviceCopy empty_on_device(const Shape& shape, DType dtype, int64_t offset = 0) {
  return on_device(OwnedTensor(shape, dtype), offset);
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (t.device().is_cuda()) return bytes_of(to_host(t));
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Equal bytes, except that two NaNs may differ in payload (f16 outputs) or, where an f16
// NaN was the input, in sign (the device's f16 -> f32 conversion may make it canonical).
void expect_same(const Tensor& got, const Tensor& want) {
  const std::vector<uint8_t> g = bytes_of(got), w = bytes_of(want);
  ASSERT_EQ(g.size(), w.size());
  if (is_fp8(want.dtype())) {
    const auto nan = [&](uint8_t b) {
      return std::isnan(want.dtype() == DType::F8E4M3 ? to_f32(f8e4m3{b}) : to_f32(f8e5m2{b}));
    };
    for (size_t i = 0; i < g.size(); ++i) {
      if (!(nan(g[i]) && nan(w[i]))) {
        ASSERT_EQ(g[i], w[i]) << "byte " << i;
      }
    }
    return;
  }
  if (want.dtype() == DType::F16) {
    const std::vector<float> gf = to_host(got)->to_f32_vector(), wf = want.to_f32_vector();
    for (size_t i = 0; i < wf.size(); ++i)
      if (std::isnan(wf[i])) {
        ASSERT_TRUE(std::isnan(gf[i])) << "element " << i;
      } else {
        ASSERT_EQ(f32_bits(gf[i]), f32_bits(wf[i])) << "element " << i;
      }
    return;
  }
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << "byte " << i;
}

OwnedTensor host_scalar(float v) { return make({v}, {1}); }

// Every midpoint between neighbouring codes of both formats, its f32 neighbours, the codes'
// own values, overflow, infinities, NaN and zeros: the encode's every branch.
std::vector<float> edge_values() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e30f, -1e30f, 1e-30f};
  for (DType q : kFp8)
    for (int c = 0; c < 255; ++c) {
      const float a =
          q == DType::F8E4M3 ? to_f32(f8e4m3{static_cast<uint8_t>(c)}) : to_f32(f8e5m2{static_cast<uint8_t>(c)});
      const float b = q == DType::F8E4M3 ? to_f32(f8e4m3{static_cast<uint8_t>(c + 1)})
                                         : to_f32(f8e5m2{static_cast<uint8_t>(c + 1)});
      v.push_back(a);
      if (!std::isfinite(a) || !std::isfinite(b) || (c & 0x7f) == 0x7f) continue;
      const float mid = (a + b) / 2;
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, INFINITY));
      v.push_back(-mid);
    }
  return v;
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> lg(-20.0f, 17.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = ((rng() & 1) ? -1.0f : 1.0f) * std::exp2(lg(rng));
  return v;
}

void check_quantize(const std::vector<float>& values, DType w, DType q, Saturation s, float scale, int64_t offset) {
  const int64_t n = static_cast<int64_t>(values.size());
  const OwnedTensor x = make(values, {n}, w);
  OwnedTensor want({n}, q);
  ops::fp8_quantize(want, x, host_scalar(scale), s);
  const DeviceCopy gx = on_device(x, offset);
  DeviceCopy gy = empty_on_device({n}, q, offset);
  const OwnedTensor gs = to_device(host_scalar(scale));
  ops::fp8_quantize(gy, gx, gs, s);
  expect_same(gy, want);
}

TEST(CudaFp8, EveryCodeDecodesAsOnTheCpu) {
  ZT_REQUIRE_GPU();
  for (DType q : kFp8)
    for (DType w : kWide)
      for (float scale : {1.0f, 0.125f, 1.0f / 3.0f})
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(str(dtype_name(q), " -> ", dtype_name(w), " scale ", scale, " offset ", offset));
          OwnedTensor codes({256}, q);
          for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(codes->data())[c] = static_cast<uint8_t>(c);
          OwnedTensor want({256}, w);
          ops::fp8_dequantize(want, codes, host_scalar(scale));
          const DeviceCopy gq = on_device(codes, offset);
          DeviceCopy gy = empty_on_device({256}, w, offset);
          ops::fp8_dequantize(gy, gq, to_device(host_scalar(scale)));
          expect_same(gy, want);
        }
}

TEST(CudaFp8, EdgeValuesEncodeAsOnTheCpu) {
  ZT_REQUIRE_GPU();
  const std::vector<float> v = edge_values();
  for (DType q : kFp8)
    for (Saturation s : kSats)
      for (float scale : {1.0f, 0.5f, 3.0f})
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(str(dtype_name(q), " sat ", s == Saturation::Saturate, " scale ", scale, " offset ", offset));
          check_quantize(v, DType::F32, q, s, scale, offset);
        }
}

TEST(CudaFp8, SixteenBitInputsAndChunkSizesEncodeAsOnTheCpu) {
  ZT_REQUIRE_GPU();
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 1000, 4099})
    for (DType w : kWide)
      for (DType q : kFp8)
        for (int64_t offset : {0, 1}) {
          SCOPED_TRACE(str("n=", n, " ", dtype_name(w), " -> ", dtype_name(q), " offset ", offset));
          check_quantize(random_values(n, static_cast<uint32_t>(n)), w, q, Saturation::Saturate, 0.75f, offset);
        }
}

// More chunks than one grid covers (8192 blocks x 256 threads x 8 elements).
TEST(CudaFp8, LargeTensorsTakeTheGridStrideLoop) {
  ZT_REQUIRE_GPU();
  const int64_t n = int64_t{8192} * 256 * 8 + 37;
  check_quantize(random_values(n, 3), DType::F32, DType::F8E4M3, Saturation::NonSaturating, 1.0f, 0);
  const OwnedTensor x = make(random_values(n, 4), {n});
  OwnedTensor want({1}, DType::F32);
  ops::amax(want, x);
  const OwnedTensor gx = to_device(x);
  OwnedTensor got({1}, DType::F32, Device::cuda());
  ops::amax(got, gx);
  EXPECT_EQ(f32_bits(to_host(got)->get_f32(0)), f32_bits(want->get_f32(0)));
}

TEST(CudaFp8, AmaxIsTheCpusAndNanWins) {
  ZT_REQUIRE_GPU();
  for (DType w : kWide)
    for (int64_t n : {0, 1, 5, 33, 257, 100000}) {
      SCOPED_TRACE(str(dtype_name(w), " n=", n));
      std::vector<float> v = random_values(n, static_cast<uint32_t>(n + 1));
      for (bool nan : {false, true}) {
        if (nan && n > 0) v[static_cast<size_t>(n / 2)] = NAN;
        const OwnedTensor x = make(v, {n}, w);
        OwnedTensor want({1}, DType::F32);
        ops::amax(want, x);
        OwnedTensor got = to_device(host_scalar(-1.0f));  // overwritten, not combined
        ops::amax(got, to_device(x));
        const float g = to_host(got)->get_f32(0), e = want->get_f32(0);
        if (std::isnan(e)) {
          EXPECT_TRUE(std::isnan(g));
        } else {
          EXPECT_EQ(f32_bits(g), f32_bits(e));
        }
      }
    }
}

TEST(CudaFp8, DeviceCopiesCastAsTheHostDoes) {
  ZT_REQUIRE_GPU();
  const std::vector<float> v = edge_values();
  const int64_t n = static_cast<int64_t>(v.size());
  for (DType w : kWide)
    for (DType q : kFp8) {
      SCOPED_TRACE(str(dtype_name(w), " <-> ", dtype_name(q)));
      const OwnedTensor x = make(v, {n}, w);
      OwnedTensor want({n}, q);
      want->copy_from(x);  // core's convert(): torch's cast
      const OwnedTensor gx = to_device(x);
      OwnedTensor gq({n}, q, Device::cuda());
      ops::copy(gq, gx);
      expect_same(gq, want);
      OwnedTensor back_want({n}, w);
      back_want->copy_from(want);
      OwnedTensor gback({n}, w, Device::cuda());
      ops::copy(gback, gq);
      expect_same(gback, back_want);
    }
  // Between the formats, through f32.
  const OwnedTensor e4 = make(v, {n}, DType::F8E4M3);
  OwnedTensor want({n}, DType::F8E5M2);
  want->copy_from(e4);
  OwnedTensor got({n}, DType::F8E5M2, Device::cuda());
  ops::copy(got, to_device(e4));
  expect_same(got, want);
}

}  // namespace
