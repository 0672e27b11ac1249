// ops/fp8.h on the CPU: quantize = one f32 multiply by the scale, then core/fp8.h's
// encode with the asked saturation; dequantize = decode, multiply, one rounding to the
// output dtype; amax = max |x| with NaN winning. Inputs in f32, bf16 and f16. The wrappers
// refuse wrong dtypes and scales; other ops refuse fp8 tensors; fp8 tensors travel through
// safetensors (F8_E4M3 / F8_E5M2) unchanged (the HF loader's refusal of fp8 weights:
// safetensors_test.cpp, HfWeights.Fp8WeightsAreRefusedByName).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/make_tensor.h"
#include "common/temp_dir.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "ops/elementwise.h"
#include "ops/fp8.h"

namespace {

using namespace zt;
using zt::testing::make;

std::vector<float> test_values() {
  std::vector<float> v = {0.0f,    -0.0f,    1.0f,          -1.0f,    0.3f,     448.0f,    464.0f, 465.0f,
                          -500.0f, 57344.0f, 61440.0f,      1e6f,     INFINITY, -INFINITY, NAN,    1e-3f,
                          1e-6f,   -2e-3f,   0.0009765625f, 3.14159f, 100.0f,   -0.07f};
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 30.0f);
  for (int i = 0; i < 5000; ++i) v.push_back(d(rng));
  return v;
}

uint8_t encode(DType q, float x, Saturation s) {
  return q == DType::F8E4M3 ? to_f8e4m3(x, s).bits : to_f8e5m2(x, s).bits;
}
float decode(DType q, uint8_t b) { return q == DType::F8E4M3 ? to_f32(f8e4m3{b}) : to_f32(f8e5m2{b}); }

OwnedTensor scalar(float v) { return make({v}, {1}); }

const DType kFp8[] = {DType::F8E4M3, DType::F8E5M2};
const DType kWide[] = {DType::F32, DType::BF16, DType::F16};

TEST(Fp8Ops, QuantizeIsOneMultiplyThenTheEncode) {
  const std::vector<float> v = test_values();
  const int64_t n = static_cast<int64_t>(v.size());
  for (DType q : kFp8)
    for (DType w : kWide)
      for (Saturation s : {Saturation::Saturate, Saturation::NonSaturating})
        for (float scale : {1.0f, 0.5f, 3.7f, 1.0f / 448.0f}) {
          SCOPED_TRACE(std::string(dtype_name(q)) + " from " + dtype_name(w) + " scale " + std::to_string(scale));
          const OwnedTensor x = make(v, {n}, w);
          const std::vector<float> xf = x->to_f32_vector();  // the input as the kernel reads it
          OwnedTensor y({n}, q);
          ops::fp8_quantize(y, x, scalar(scale), s);
          const uint8_t* got = static_cast<const uint8_t*>(y->data());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], encode(q, xf[i] * scale, s)) << "element " << i;
        }
}

TEST(Fp8Ops, SaturateClampsWhereTheCastGivesNanOrInf) {
  const OwnedTensor x = make({1000.0f, -1e9f, INFINITY, NAN}, {4});
  OwnedTensor y({4}, DType::F8E4M3);
  ops::fp8_quantize(y, x, scalar(1.0f), Saturation::Saturate);
  const uint8_t* b = static_cast<const uint8_t*>(y->data());
  EXPECT_EQ(b[0], 0x7e);
  EXPECT_EQ(b[1], 0xfe);
  EXPECT_EQ(b[2], 0x7e);
  EXPECT_EQ(b[3], 0x7f);
  ops::fp8_quantize(y, x, scalar(1.0f), Saturation::NonSaturating);
  EXPECT_EQ(b[0], 0x7f);
  EXPECT_EQ(b[1], 0xff);
  EXPECT_EQ(b[2], 0x7f);
  OwnedTensor z({4}, DType::F8E5M2);
  ops::fp8_quantize(z, x, scalar(1.0f), Saturation::NonSaturating);
  const uint8_t* c = static_cast<const uint8_t*>(z->data());
  EXPECT_EQ(c[0], 0x64);  // 1024, nearer to 1000 than 896 (E5M2 steps of 128 below 1024)
  EXPECT_EQ(c[1], 0xfc);
  EXPECT_EQ(c[2], 0x7c);
  EXPECT_EQ(c[3], 0x7f);
}

TEST(Fp8Ops, DequantizeDecodesMultipliesAndRoundsOnce) {
  for (DType q : kFp8)
    for (DType w : kWide)
      for (float scale : {1.0f, 0.25f, 1.0f / 3.0f, 448.0f}) {
        SCOPED_TRACE(std::string(dtype_name(q)) + " to " + dtype_name(w) + " scale " + std::to_string(scale));
        OwnedTensor x({256}, q);
        for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(x->data())[c] = static_cast<uint8_t>(c);
        OwnedTensor y({256}, w);
        ops::fp8_dequantize(y, x, scalar(scale));
        OwnedTensor want({256}, w);
        for (int c = 0; c < 256; ++c) want->set_f32(c, decode(q, static_cast<uint8_t>(c)) * scale);
        const std::vector<float> got = y->to_f32_vector(), exp = want->to_f32_vector();
        for (int c = 0; c < 256; ++c) {
          if (std::isnan(exp[c])) {
            EXPECT_TRUE(std::isnan(got[c])) << "code " << c;
          } else {
            EXPECT_EQ(f32_bits(got[c]), f32_bits(exp[c])) << "code " << c;
          }
        }
      }
}

TEST(Fp8Ops, QuantizeThenDequantizeWithTheInverseScaleIsCloseAndExactOnCodes) {
  const std::vector<float> v = {0.001f, -0.5f, 2.0f, 7.25f, -13.0f, 100.0f};
  const OwnedTensor x = make(v, {6});
  OwnedTensor amax_out({1}, DType::F32);
  ops::amax(amax_out, x);
  const float scale = kF8E4M3Max / amax_out->get_f32(0);
  OwnedTensor q({6}, DType::F8E4M3), back({6}, DType::F32);
  ops::fp8_quantize(q, x, scalar(scale), Saturation::Saturate);
  ops::fp8_dequantize(back, q, scalar(1.0f / scale));
  // Within half a step: 1/16 of the value for normals, half the subnormal step 2^-9 (scaled
  // back) below 2^-6 * (1/scale).
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_NEAR(back->get_f32(static_cast<int64_t>(i)), v[i], std::fabs(v[i]) / 16 + std::ldexp(1.0f, -10) / scale);
  EXPECT_EQ(static_cast<const uint8_t*>(q->data())[5], 0x7e);  // amax lands on 448
}

TEST(Fp8Ops, AmaxIsTheLargestMagnitudeAndNanWins) {
  for (DType w : kWide) {
    SCOPED_TRACE(dtype_name(w));
    OwnedTensor out({1}, DType::F32);
    ops::amax(out, make({1.0f, -7.5f, 3.0f, -0.0f}, {4}, w));
    EXPECT_EQ(out->get_f32(0), 7.5f);
    ops::amax(out, make({-0.0f, 0.0f}, {2}, w));
    EXPECT_EQ(f32_bits(out->get_f32(0)), 0u);
    ops::amax(out, make({1.0f, -INFINITY, 2.0f}, {3}, w));
    EXPECT_EQ(out->get_f32(0), INFINITY);
    ops::amax(out, make({1.0f, NAN, INFINITY}, {3}, w));
    EXPECT_TRUE(std::isnan(out->get_f32(0)));
    ops::amax(out, make({-NAN, 2.0f}, {2}, w));
    EXPECT_TRUE(std::isnan(out->get_f32(0)));
    OwnedTensor empty({0}, w);
    out->set_f32(0, 5.0f);
    ops::amax(out, empty);
    EXPECT_EQ(out->get_f32(0), 0.0f);
  }
  // Many elements (the parallel path): the maximum anywhere.
  std::vector<float> big(100000, 1.0f);
  big[77777] = -123.0f;
  OwnedTensor out({1}, DType::F32);
  ops::amax(out, make(big, {100000}));
  EXPECT_EQ(out->get_f32(0), 123.0f);
}

TEST(Fp8Ops, WrongDtypesAndScalesAreRefused) {
  const OwnedTensor x = make({1.0f, 2.0f}, {2});
  OwnedTensor q({2}, DType::F8E4M3), f({2}, DType::F32), q3({3}, DType::F8E4M3);
  EXPECT_THROW(ops::fp8_quantize(f, x, scalar(1.0f), Saturation::Saturate), Error);   // output not fp8
  EXPECT_THROW(ops::fp8_quantize(q, q, scalar(1.0f), Saturation::Saturate), Error);   // input fp8
  EXPECT_THROW(ops::fp8_quantize(q3, x, scalar(1.0f), Saturation::Saturate), Error);  // sizes
  EXPECT_THROW(ops::fp8_quantize(q, x, make({1.0f, 2.0f}, {2}), Saturation::Saturate), Error);
  EXPECT_THROW(ops::fp8_quantize(q, x, make({1.0f}, {1}, DType::BF16), Saturation::Saturate), Error);
  EXPECT_THROW(ops::fp8_dequantize(q, q, scalar(1.0f)), Error);  // output fp8
  EXPECT_THROW(ops::fp8_dequantize(f, x, scalar(1.0f)), Error);  // input not fp8
  EXPECT_THROW(ops::amax(f, x), Error);                          // output not one element
  EXPECT_THROW(ops::amax(scalar(0.0f), q), Error);               // fp8 input
}

TEST(Fp8Ops, ComputeOpsRefuseFp8Tensors) {
  OwnedTensor q({2}, DType::F8E4M3);
  q->zero();
  try {
    ops::scale_inplace(q, 2.0f);
    FAIL() << "scaled an fp8 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f8_e4m3"), std::string::npos) << e.what();
  }
}

TEST(Fp8Ops, SafetensorsKeepFp8Bytes) {
  const zt::testing::TempDir dir(zt::testing::build_temp_path("fp8_ops_"));
  const std::string path = dir.file("fp8.safetensors");
  OwnedTensor e4({3, 2}, DType::F8E4M3), e5({5}, DType::F8E5M2), w({2}, DType::F32);
  for (int i = 0; i < 6; ++i) static_cast<uint8_t*>(e4->data())[i] = static_cast<uint8_t>(0x30 + i);
  for (int i = 0; i < 5; ++i) static_cast<uint8_t*>(e5->data())[i] = static_cast<uint8_t>(0xf0 + i);
  w->fill_f32(1.5f);
  io::save_safetensors(path, {{"a", e4}, {"b", e5}, {"c", w}});
  const io::SafetensorsReader r(path);
  EXPECT_EQ(r.info("a").dtype_name, "F8_E4M3");
  EXPECT_EQ(r.info("b").dtype_name, "F8_E5M2");
  EXPECT_TRUE(r.info("a").supported);
  EXPECT_EQ(r.info("a").dtype, DType::F8E4M3);
  EXPECT_EQ(r.info("b").dtype, DType::F8E5M2);
  const Tensor a = r.tensor("a"), b = r.tensor("b");
  EXPECT_EQ(a.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<const uint8_t*>(a.data())[i], 0x30 + i);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(static_cast<const uint8_t*>(b.data())[i], 0xf0 + i);
  EXPECT_EQ(r.tensor("c").get_f32(1), 1.5f);
  // The reference writer's order: larger dtypes first, E4M3 before E5M2.
  EXPECT_LT(r.info("c").begin, r.info("a").begin);
  EXPECT_LT(r.info("a").begin, r.info("b").begin);
  EXPECT_STREQ(io::safetensors_dtype_name(DType::F8E5M2), "F8_E5M2");
}

}  // namespace
