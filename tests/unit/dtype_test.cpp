// bf16/f16 conversions: round to nearest even on edge values, subnormals, overflow, inf and
// NaN; exhaustive round trips of all 65536 bit patterns; to_f16 against the F16C hardware
// conversion (RNE) on millions of random floats; dtype names, sizes and parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace {
using zt::bf16;
using zt::f16;

uint16_t h(float f) { return zt::to_f16(f).bits; }
uint16_t b(float f) { return zt::to_bf16(f).bits; }
float fh(uint16_t bits) { return zt::to_f32(f16{bits}); }
float fb(uint16_t bits) { return zt::to_f32(bf16{bits}); }
float from_bits(uint32_t u) { return zt::bits_f32(u); }

TEST(DType, SizesNamesParse) {
  EXPECT_EQ(zt::dtype_size(zt::DType::F32), 4u);
  EXPECT_EQ(zt::dtype_size(zt::DType::BF16), 2u);
  EXPECT_EQ(zt::dtype_size(zt::DType::F16), 2u);
  EXPECT_EQ(zt::dtype_size(zt::DType::I32), 4u);
  EXPECT_EQ(zt::dtype_size(zt::DType::I64), 8u);
  EXPECT_STREQ(zt::dtype_name(zt::DType::BF16), "bf16");
  EXPECT_EQ(zt::parse_dtype("torch.bfloat16"), zt::DType::BF16);
  EXPECT_EQ(zt::parse_dtype("fp16"), zt::DType::F16);
  EXPECT_EQ(zt::parse_dtype("half"), zt::DType::F16);
  EXPECT_EQ(zt::parse_dtype("F32"), zt::DType::F32);
  EXPECT_EQ(zt::parse_dtype("I64"), zt::DType::I64);
  EXPECT_THROW(zt::parse_dtype("float8"), zt::Error);
  EXPECT_TRUE(zt::is_floating(zt::DType::BF16));
  EXPECT_FALSE(zt::is_floating(zt::DType::I32));
}

TEST(DType, F16Zeros) {
  EXPECT_EQ(h(0.0f), 0x0000);
  EXPECT_EQ(h(-0.0f), 0x8000);
  EXPECT_EQ(zt::f32_bits(fh(0x8000)), 0x80000000u);
}

TEST(DType, F16Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(h(tiny), 0x0001);
  EXPECT_EQ(fh(0x0001), tiny);
  EXPECT_EQ(h(-tiny), 0x8001);
  // Largest subnormal 1023 * 2^-24 and smallest normal 2^-14.
  EXPECT_EQ(h(1023.0f * tiny), 0x03ff);
  EXPECT_EQ(fh(0x03ff), 1023.0f * tiny);
  EXPECT_EQ(h(std::ldexp(1.0f, -14)), 0x0400);
  // Exactly half of the smallest subnormal ties to even (zero); just above rounds up.
  EXPECT_EQ(h(0.5f * tiny), 0x0000);
  EXPECT_EQ(h(std::nextafter(0.5f * tiny, 1.0f)), 0x0001);
  EXPECT_EQ(h(-0.5f * tiny), 0x8000);
  EXPECT_EQ(h(0.25f * tiny), 0x0000);
  // 1.5 * 2^-24 ties to 2 (even), 2.5 ties to 2, 3.5 ties to 4.
  EXPECT_EQ(h(1.5f * tiny), 0x0002);
  EXPECT_EQ(h(2.5f * tiny), 0x0002);
  EXPECT_EQ(h(3.5f * tiny), 0x0004);
  // Halfway between the largest subnormal and the smallest normal rounds to even (normal).
  EXPECT_EQ(h(1023.5f * tiny), 0x0400);
  EXPECT_EQ(h(1022.5f * tiny), 0x03fe);
  // f32 subnormals go to zero.
  EXPECT_EQ(h(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(DType, F16NormalRoundingAndOverflow) {
  EXPECT_EQ(h(1.0f), 0x3c00);
  EXPECT_EQ(h(-2.0f), 0xc000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(h(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even).
  EXPECT_EQ(h(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(h(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(h(65504.0f), 0x7bff);
  EXPECT_EQ(fh(0x7bff), 65504.0f);
  EXPECT_EQ(h(65519.0f), 0x7bff);
  EXPECT_EQ(h(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(h(65520.0f), 0x7c00);
  EXPECT_EQ(h(-65520.0f), 0xfc00);
  EXPECT_EQ(h(1e10f), 0x7c00);
  EXPECT_EQ(h(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(h(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(h(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isinf(fh(0x7c00)) && fh(0x7c00) > 0);
  EXPECT_TRUE(std::isinf(fh(0xfc00)) && fh(0xfc00) < 0);
}

TEST(DType, NaNStaysNaN) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(),
                        from_bits(0x7f800001u),
                        from_bits(0xff800001u),
                        from_bits(0x7fc00000u),
                        from_bits(0x7f802000u)};
  for (float n : nans) {
    EXPECT_TRUE(std::isnan(fh(h(n)))) << std::hex << zt::f32_bits(n);
    EXPECT_TRUE(std::isnan(fb(b(n)))) << std::hex << zt::f32_bits(n);
    EXPECT_EQ(h(n) & 0x7e00, 0x7e00);  // quiet
    EXPECT_EQ(b(n) & 0x7fc0, 0x7fc0);
    EXPECT_EQ(h(n) >> 15, zt::f32_bits(n) >> 31);  // sign kept
    EXPECT_EQ(b(n) >> 15, zt::f32_bits(n) >> 31);
  }
}

TEST(DType, BF16Rounding) {
  EXPECT_EQ(b(0.0f), 0x0000);
  EXPECT_EQ(b(-0.0f), 0x8000);
  EXPECT_EQ(b(1.0f), 0x3f80);
  // Ties to even: 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7.
  EXPECT_EQ(b(from_bits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(b(from_bits(0x3f818000u)), 0x3f82);  // halfway, odd below: up
  EXPECT_EQ(b(from_bits(0x3f808001u)), 0x3f81);  // above halfway
  EXPECT_EQ(b(from_bits(0x3f807fffu)), 0x3f80);  // below halfway
  // Overflow: the largest f32 rounds to inf; the largest bf16 stays.
  EXPECT_EQ(b(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(b(from_bits(0x7f7f0000u)), 0x7f7f);
  EXPECT_EQ(b(from_bits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(b(-std::numeric_limits<float>::infinity()), 0xff80);
  // Subnormals keep their top bits (bf16 has f32's exponent range).
  EXPECT_EQ(b(from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(b(from_bits(0x00018000u)), 0x0002);  // tie, odd below: up
  EXPECT_EQ(b(from_bits(0x00008000u)), 0x0000);  // tie, even below: down
}

// Every non-NaN bf16/f16 value converts to f32 and back to the same bits.
TEST(DType, ExhaustiveRoundTrips) {
  for (uint32_t u = 0; u < 65536; ++u) {
    const uint16_t bits = static_cast<uint16_t>(u);
    const float fhv = fh(bits), fbv = fb(bits);
    if (std::isnan(fhv)) {
      EXPECT_TRUE(std::isnan(fh(h(fhv))));
    } else {
      ASSERT_EQ(h(fhv), bits) << std::hex << u;
    }
    if (std::isnan(fbv)) {
      EXPECT_TRUE(std::isnan(fb(b(fbv))));
    } else {
      ASSERT_EQ(b(fbv), bits) << std::hex << u;
    }
  }
}

// f16 -> f32 must be exact: compare with the hardware widening for every pattern.
#if defined(__F16C__)
TEST(DType, F16ToF32MatchesHardware) {
  for (uint32_t u = 0; u < 65536; ++u) {
    const float hw = _cvtsh_ss(static_cast<unsigned short>(u));
    const float sw = fh(static_cast<uint16_t>(u));
    if (std::isnan(hw)) {
      EXPECT_TRUE(std::isnan(sw));
    } else {
      ASSERT_EQ(zt::f32_bits(sw), zt::f32_bits(hw)) << std::hex << u;
    }
  }
}

TEST(DType, ToF16MatchesF16CHardware) {
  std::mt19937 gen(12345);
  auto check = [](float f) {
    const uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, 0));  // 0 = round to nearest even
    const uint16_t sw = h(f);
    if (std::isnan(f)) {
      ASSERT_EQ(sw & 0x7e00, 0x7e00);
      ASSERT_EQ(hw & 0x7e00, 0x7e00);
    } else {
      ASSERT_EQ(sw, hw) << "f=" << f << " bits " << std::hex << zt::f32_bits(f);
    }
  };
  // Random bit patterns (every exponent), then values concentrated in f16's range.
  for (int i = 0; i < 2000000; ++i) check(from_bits(static_cast<uint32_t>(gen())));
  std::uniform_int_distribution<uint32_t> in_range(0x33000000u - 0x100000u, 0x47800000u + 0x100000u);
  for (int i = 0; i < 3000000; ++i) {
    const uint32_t u = in_range(gen) | (gen() & 0x80000000u);
    check(from_bits(u));
  }
  // Every tie and near-tie around each f16 value.
  for (uint32_t x = 0; x < 0x7c00; ++x) {
    const uint32_t f = zt::f32_bits(fh(static_cast<uint16_t>(x)));
    for (int d = -2; d <= 2; ++d) check(from_bits(f + static_cast<uint32_t>(d)));
    const float mid = 0.5f * (fh(static_cast<uint16_t>(x)) + fh(static_cast<uint16_t>(x + 1)));
    check(mid);
    check(std::nextafter(mid, 0.0f));
    check(std::nextafter(mid, 1e30f));
  }
}
#endif

TEST(DType, ConvertBetweenTypes) {
  const float src[] = {1.5f, -2.75f, 65504.0f, 1e-8f};
  f16 half[4];
  zt::convert(src, zt::DType::F32, half, zt::DType::F16, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(half[i].bits, h(src[i]));
  bf16 bh[4];
  zt::convert(half, zt::DType::F16, bh, zt::DType::BF16, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bh[i].bits, b(fh(half[i].bits)));
  int32_t ints[4];
  zt::convert(src, zt::DType::F32, ints, zt::DType::I32, 4);
  EXPECT_EQ(ints[0], 1);
  EXPECT_EQ(ints[1], -2);  // truncates toward zero
  int64_t big[2] = {1, -3};
  float back[2];
  zt::convert(big, zt::DType::I64, back, zt::DType::F32, 2);
  EXPECT_EQ(back[1], -3.0f);
}

}  // namespace
