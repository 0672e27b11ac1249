// core/fp8.h's E4M3 and E5M2 bit code against the formats' definitions, computed here
// independently (sign * (1 + m / 2^M) * 2^(e - bias), subnormals m * 2^(1 - bias - M)):
// all 256 codes of each format decode to the reference, every finite code round-trips,
// every midpoint between neighbours rounds to the even code (and its f32 neighbours to the
// nearer one), overflow saturates or becomes NaN / inf as asked, NaN and signed zeros
// survive, and a million random floats encode to the nearest code found by search. Also:
// the dtype names, sizes and parsing, and convert() / Tensor::copy_from as torch's cast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using zt::Saturation;

struct Fmt {
  const char* name;
  int man, bias;
  bool ieee_specials;  // E5M2: exponent all ones is inf / NaN; E4M3: only S.1111.111 is NaN
  float max;
  uint8_t max_code;
  uint8_t (*encode)(float, Saturation);
  float (*decode)(uint8_t);
};

uint8_t enc_e4m3(float f, Saturation s) { return zt::to_f8e4m3(f, s).bits; }
uint8_t enc_e5m2(float f, Saturation s) { return zt::to_f8e5m2(f, s).bits; }
float dec_e4m3(uint8_t b) { return zt::to_f32(zt::f8e4m3{b}); }
float dec_e5m2(uint8_t b) { return zt::to_f32(zt::f8e5m2{b}); }

const Fmt kE4M3{"e4m3", 3, 7, false, 448.0f, 0x7e, enc_e4m3, dec_e4m3};
const Fmt kE5M2{"e5m2", 2, 15, true, 57344.0f, 0x7b, enc_e5m2, dec_e5m2};
const Fmt* const kFormats[] = {&kE4M3, &kE5M2};
const Saturation kSats[] = {Saturation::Saturate, Saturation::NonSaturating};

// The value of a code from the format's definition (NaN for NaN codes).
double reference(const Fmt& f, int code) {
  const int exp_bits = 7 - f.man;
  const int e = (code >> f.man) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << f.man) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e_max = (1 << exp_bits) - 1;
  if (f.ieee_specials && e == e_max) return m == 0 ? sign * INFINITY : NAN;
  if (!f.ieee_specials && e == e_max && m == (1 << f.man) - 1) return NAN;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - f.bias - f.man);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.man), e - f.bias);
}

bool is_nan_code(const Fmt& f, int code) { return std::isnan(reference(f, code)); }

// The non-negative finite codes in increasing value order (codes 0x00 .. max_code).
std::vector<int> positive_finite_codes(const Fmt& f) {
  std::vector<int> codes;
  for (int c = 0; c <= f.max_code; ++c) codes.push_back(c);
  return codes;
}

// Nearest code by search, ties to the even code; values beyond max + half an ulp overflow.
int nearest_code(const Fmt& f, float x, Saturation sat) {
  if (std::isnan(x)) return (std::signbit(x) ? 0x80 : 0) | 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  const std::vector<int> codes = positive_finite_codes(f);
  const double top = reference(f, f.max_code);
  const double ulp_top = top - reference(f, f.max_code - 1);
  const int overflow = sat == Saturation::Saturate ? f.max_code : (f.ieee_specials ? f.max_code + 1 : 0x7f);
  if (a > top + ulp_top / 2 || (a == top + ulp_top / 2 && (f.max_code & 1))) return sign | overflow;
  int best = 0;
  for (int c : codes) {
    const double d = std::fabs(reference(f, c) - a), bd = std::fabs(reference(f, best) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) best = c;
  }
  return sign | best;
}

TEST(Fp8, NamesSizesAndParsing) {
  EXPECT_EQ(zt::dtype_size(zt::DType::F8E4M3), 1u);
  EXPECT_EQ(zt::dtype_size(zt::DType::F8E5M2), 1u);
  EXPECT_STREQ(zt::dtype_name(zt::DType::F8E4M3), "f8_e4m3");
  EXPECT_STREQ(zt::dtype_name(zt::DType::F8E5M2), "f8_e5m2");
  for (const char* n : {"f8_e4m3", "F8_E4M3", "float8_e4m3fn", "torch.float8_e4m3fn", "fp8_e4m3", "e4m3"})
    EXPECT_EQ(zt::parse_dtype(n), zt::DType::F8E4M3) << n;
  for (const char* n : {"f8_e5m2", "F8_E5M2", "float8_e5m2", "torch.float8_e5m2", "fp8_e5m2", "e5m2"})
    EXPECT_EQ(zt::parse_dtype(n), zt::DType::F8E5M2) << n;
  EXPECT_THROW(zt::parse_dtype("float8"), zt::Error);
  try {
    zt::parse_dtype("torch.float8_e4m3fnuz");
    FAIL() << "fnuz parsed";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("fnuz"), std::string::npos) << e.what();
  }
  // fp8 is storage: not a compute floating dtype, so every op's is_floating check refuses it.
  EXPECT_FALSE(zt::is_floating(zt::DType::F8E4M3));
  EXPECT_TRUE(zt::is_fp8(zt::DType::F8E5M2));
  EXPECT_FALSE(zt::is_fp8(zt::DType::BF16));
}

TEST(Fp8, DispatchFloatRefusesFp8NamingTheConversion) {
  try {
    zt::dispatch_float(zt::DType::F8E4M3, [](auto) {});
    FAIL() << "dispatched";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("storage dtype"), std::string::npos) << e.what();
  }
}

TEST(Fp8, EveryCodeDecodesToTheFormatsValue) {
  for (const Fmt* f : kFormats)
    for (int c = 0; c < 256; ++c) {
      SCOPED_TRACE(std::string(f->name) + " code " + std::to_string(c));
      const double want = reference(*f, c);
      const float got = f->decode(static_cast<uint8_t>(c));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        EXPECT_EQ(static_cast<double>(got), want);
      }
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);  // -0 and negative NaN keep the sign
    }
}

TEST(Fp8, KnownValues) {
  struct Known {
    const Fmt* f;
    uint8_t code;
    float value;
  };
  const Known known[] = {
      {&kE4M3, 0x7e, 448.0f},
      {&kE4M3, 0x77, 240.0f},
      {&kE4M3, 0x38, 1.0f},
      {&kE4M3, 0xc0, -2.0f},
      {&kE4M3, 0x30, 0.5f},
      {&kE4M3, 0x08, std::ldexp(1.0f, -6)},      // smallest normal
      {&kE4M3, 0x01, std::ldexp(1.0f, -9)},      // smallest subnormal
      {&kE4M3, 0x07, 7 * std::ldexp(1.0f, -9)},  // largest subnormal
      {&kE4M3, 0x7d, 416.0f},
      {&kE4M3, 0x80, -0.0f},
      {&kE5M2, 0x7b, 57344.0f},
      {&kE5M2, 0x3c, 1.0f},
      {&kE5M2, 0x3e, 1.5f},
      {&kE5M2, 0x04, std::ldexp(1.0f, -14)},
      {&kE5M2, 0x01, std::ldexp(1.0f, -16)},
      {&kE5M2, 0x7c, INFINITY},
      {&kE5M2, 0xfc, -INFINITY},
      {&kE5M2, 0x5b, 224.0f},
  };
  for (const Known& k : known) {
    SCOPED_TRACE(std::string(k.f->name) + " " + std::to_string(k.value));
    EXPECT_EQ(zt::f32_bits(k.f->decode(k.code)), zt::f32_bits(k.value));
    if (std::isfinite(k.value)) {
      for (Saturation s : kSats) EXPECT_EQ(k.f->encode(k.value, s), k.code);
    }
  }
  EXPECT_TRUE(std::isnan(dec_e4m3(0x7f)));
  EXPECT_TRUE(std::isnan(dec_e4m3(0xff)));
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(dec_e5m2(c))) << int(c);
  EXPECT_EQ(dec_e4m3(0x78), 256.0f);  // S.1111.000: a number in E4M3, not infinity
  EXPECT_EQ(kE4M3.max, dec_e4m3(kE4M3.max_code));
  EXPECT_EQ(kE5M2.max, dec_e5m2(kE5M2.max_code));
  EXPECT_EQ(zt::kF8E4M3Max, 448.0f);
  EXPECT_EQ(zt::kF8E5M2Max, 57344.0f);
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (const Fmt* f : kFormats)
    for (int c = 0; c < 256; ++c) {
      if (is_nan_code(*f, c)) continue;
      const float v = f->decode(static_cast<uint8_t>(c));
      if (std::isinf(v)) continue;  // E5M2 infinities: below
      for (Saturation s : kSats) EXPECT_EQ(f->encode(v, s), c) << f->name << " code " << c;
    }
}

TEST(Fp8, MidpointsTieToEvenAndNeighboursRoundToTheNearer) {
  for (const Fmt* f : kFormats)
    for (int sign : {0, 0x80}) {
      const std::vector<int> codes = positive_finite_codes(*f);
      for (size_t i = 0; i + 1 < codes.size(); ++i) {
        const float lo = f->decode(static_cast<uint8_t>(codes[i])), hi = f->decode(static_cast<uint8_t>(codes[i + 1]));
        const float mid = (lo + hi) / 2;  // exact: one more bit than the format has
        ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
        const int even = (codes[i] & 1) == 0 ? codes[i] : codes[i + 1];
        const float s = sign ? -1.0f : 1.0f;
        SCOPED_TRACE(std::string(f->name) + " between codes " + std::to_string(codes[i]) + " and " +
                     std::to_string(codes[i + 1]) + (sign ? " (negative)" : ""));
        for (Saturation sat : kSats) {
          EXPECT_EQ(f->encode(s * mid, sat), sign | even);
          EXPECT_EQ(f->encode(s * std::nextafter(mid, 0.0f), sat), sign | codes[i]);
          EXPECT_EQ(f->encode(s * std::nextafter(mid, INFINITY), sat), sign | codes[i + 1]);
        }
      }
    }
}

TEST(Fp8, TinyValuesRoundToZeroOrTheSmallestSubnormal) {
  for (const Fmt* f : kFormats) {
    const float tiny = f->decode(0x01);
    for (Saturation s : kSats) {
      EXPECT_EQ(f->encode(0.0f, s), 0x00);
      EXPECT_EQ(f->encode(-0.0f, s), 0x80);
      EXPECT_EQ(f->encode(tiny / 2, s), 0x00);  // tie: to even (zero)
      EXPECT_EQ(f->encode(-tiny / 2, s), 0x80);
      EXPECT_EQ(f->encode(std::nextafter(tiny / 2, 1.0f), s), 0x01);
      EXPECT_EQ(f->encode(tiny / 4, s), 0x00);
      EXPECT_EQ(f->encode(std::numeric_limits<float>::denorm_min(), s), 0x00);
      EXPECT_EQ(f->encode(-std::numeric_limits<float>::denorm_min(), s), 0x80);
      EXPECT_EQ(f->encode(std::numeric_limits<float>::min(), s), 0x00);
      EXPECT_EQ(f->encode(1.5f * tiny, s), 0x02);  // tie between 1 and 2: even
      EXPECT_EQ(f->encode(2.5f * tiny, s), 0x02);
    }
  }
}

TEST(Fp8, OverflowSaturatesOrBecomesNanOrInfinity) {
  using S = Saturation;
  // E4M3: 448 is the top; 464 ties to the even 448; above it there is no finite value.
  EXPECT_EQ(enc_e4m3(464.0f, S::NonSaturating), 0x7e);
  EXPECT_EQ(enc_e4m3(std::nextafter(464.0f, INFINITY), S::NonSaturating), 0x7f);
  EXPECT_EQ(enc_e4m3(std::nextafter(464.0f, INFINITY), S::Saturate), 0x7e);
  EXPECT_EQ(enc_e4m3(480.0f, S::NonSaturating), 0x7f);
  EXPECT_EQ(enc_e4m3(-1e30f, S::NonSaturating), 0xff);
  EXPECT_EQ(enc_e4m3(-1e30f, S::Saturate), 0xfe);
  EXPECT_EQ(enc_e4m3(INFINITY, S::NonSaturating), 0x7f);  // no infinity in E4M3: NaN
  EXPECT_EQ(enc_e4m3(INFINITY, S::Saturate), 0x7e);
  EXPECT_EQ(enc_e4m3(-INFINITY, S::Saturate), 0xfe);
  EXPECT_EQ(enc_e4m3(std::numeric_limits<float>::max(), S::NonSaturating), 0x7f);
  // E5M2: 57344 is the top; 61440 ties to the even code above it, infinity.
  EXPECT_EQ(enc_e5m2(61440.0f, S::NonSaturating), 0x7c);
  EXPECT_EQ(enc_e5m2(std::nextafter(61440.0f, 0.0f), S::NonSaturating), 0x7b);
  EXPECT_EQ(enc_e5m2(61440.0f, S::Saturate), 0x7b);
  EXPECT_EQ(enc_e5m2(-1e30f, S::NonSaturating), 0xfc);
  EXPECT_EQ(enc_e5m2(-1e30f, S::Saturate), 0xfb);
  EXPECT_EQ(enc_e5m2(INFINITY, S::NonSaturating), 0x7c);
  EXPECT_EQ(enc_e5m2(-INFINITY, S::NonSaturating), 0xfc);
  EXPECT_EQ(enc_e5m2(INFINITY, S::Saturate), 0x7b);
  EXPECT_EQ(enc_e5m2(-INFINITY, S::Saturate), 0xfb);
}

TEST(Fp8, NanStaysNanOfItsSign) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                        zt::bits_f32(0x7f800001u), zt::bits_f32(0x7fffffffu)};
  for (const Fmt* f : kFormats)
    for (Saturation s : kSats)
      for (float n : nans) {
        EXPECT_EQ(f->encode(n, s), 0x7f) << f->name;
        EXPECT_EQ(f->encode(-n, s), 0xff) << f->name;
      }
}

TEST(Fp8, RandomFloatsEncodeToTheNearestCode) {
  std::mt19937 rng(41);
  for (const Fmt* f : kFormats) {
    std::uniform_real_distribution<float> log_mag(std::log2(f->decode(0x01)) - 3, std::log2(f->max) + 2);
    for (int i = 0; i < 200000; ++i) {
      const float mag = std::exp2(log_mag(rng));
      const float x = (rng() & 1) ? -mag : mag;
      for (Saturation s : kSats) ASSERT_EQ(f->encode(x, s), nearest_code(*f, x, s)) << f->name << " x=" << x;
    }
  }
}

TEST(Fp8, ConvertAndCopyCastAsTorchDoes) {
  // convert() is torch's x.to(float8): nearest even, no saturation.
  const std::vector<float> x = {1.0f, -0.0f, 448.0f, 500.0f, -1e6f, NAN, 0.3f, 61440.0f, 1e-9f};
  std::vector<uint8_t> e4(x.size()), e5(x.size());
  zt::convert(x.data(), zt::DType::F32, e4.data(), zt::DType::F8E4M3, x.size());
  zt::convert(x.data(), zt::DType::F32, e5.data(), zt::DType::F8E5M2, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(e4[i], enc_e4m3(x[i], Saturation::NonSaturating)) << x[i];
    EXPECT_EQ(e5[i], enc_e5m2(x[i], Saturation::NonSaturating)) << x[i];
  }
  // Through a tensor: f32 -> e4m3 -> bf16 (exact: every E4M3 value is a bf16) -> e5m2.
  zt::OwnedTensor a = zt::OwnedTensor::zeros({3}, zt::DType::F32);
  a->set_f32(0, 0.3f);
  a->set_f32(1, -3.0f);
  a->set_f32(2, 1000.0f);
  zt::OwnedTensor q({3}, zt::DType::F8E4M3), w({3}, zt::DType::BF16), r({3}, zt::DType::F8E5M2);
  q->copy_from(a);
  w->copy_from(q);
  r->copy_from(w);
  const std::vector<float> wide = w->to_f32_vector();
  EXPECT_EQ(wide[0], dec_e4m3(enc_e4m3(0.3f, Saturation::NonSaturating)));
  EXPECT_EQ(wide[1], -3.0f);
  EXPECT_TRUE(std::isnan(wide[2]));  // 1000 is past E4M3's range
  EXPECT_EQ(r->get_f32(1), -3.0f);
  EXPECT_TRUE(std::isnan(r->get_f32(2)));
}

}  // namespace
