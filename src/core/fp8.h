// The two 8-bit floating-point storage formats of the OCP FP8 specification (Hopper's
// tensor-core inputs), as bit code shared by the host and the CUDA kernels (one definition,
// so a device conversion is bitwise the CPU's):
//   E4M3 ("e4m3fn": torch.float8_e4m3fn, safetensors F8_E4M3): 1 sign, 4 exponent bits
//     (bias 7), 3 mantissa bits; no infinities, NaN is S.1111.111 only, so the largest
//     finite value is 1.75 * 2^8 = 448; subnormals k * 2^-9.
//   E5M2 (torch.float8_e5m2, safetensors F8_E5M2): 1 sign, 5 exponent bits (bias 15), 2
//     mantissa bits; IEEE-like: S.11111.00 is infinity, S.11111.xx (xx != 0) NaN; largest
//     finite 1.75 * 2^15 = 57344; subnormals k * 2^-16 (the top byte of an f16).
// Encoding from f32 rounds to nearest, ties to even, and keeps the sign of zero. What a
// value too large for the format becomes is the caller's choice (Saturation):
//   NonSaturating: what torch's x.to(float8_*) gives: E4M3 NaN, E5M2 infinity (an input
//     infinity alike). "Too large" is after rounding: E4M3 takes up to 464 (the tie with
//     the missing 480 goes to the even 448), E5M2 up to 61440 exclusive.
//   Saturate: the largest finite value of the sign (PTX cvt.satfinite; Transformer Engine
//     and torchao clamp to it after scaling), an infinity included.
// A NaN stays a NaN of its sign (S.1111.111 in E4M3, S.11111.11 in E5M2) either way.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace zt {

enum class Saturation : uint8_t { Saturate, NonSaturating };

struct f8e4m3 {
  uint8_t bits = 0;
};
struct f8e5m2 {
  uint8_t bits = 0;
};

namespace fp8_detail {

ZT_HOST_DEVICE inline uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ZT_HOST_DEVICE inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// One format: M mantissa bits, exponent bias B, the code of its largest finite magnitude,
// and what an overflow becomes without saturation.
template <uint32_t M, uint32_t B, uint32_t MaxCode, uint32_t OverflowCode>
struct Format {
  static constexpr uint32_t kMan = M, kBias = B, kMaxCode = MaxCode, kOverflowCode = OverflowCode;
};
using E4M3 = Format<3, 7, 0x7e, 0x7f>;   // 448; overflow: NaN
using E5M2 = Format<2, 15, 0x7b, 0x7c>;  // 57344; overflow: infinity

template <class F>
ZT_HOST_DEVICE inline uint8_t encode(float x, Saturation sat) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const uint32_t overflow = sat == Saturation::Saturate ? F::kMaxCode : F::kOverflowCode;
  if (abs == 0x7f800000u) return static_cast<uint8_t>(sign | overflow);
  constexpr uint32_t kDrop = 23 - F::kMan;  // f32 mantissa bits below the format's
  // The smallest normal, 2^(1 - bias), as f32 bits.
  constexpr uint32_t kMinNormal = (127u + 1u - F::kBias) << 23;
  uint32_t code;
  if (abs >= kMinNormal) {
    // Rebias the exponent, then round the mantissa to M bits (a carry moves into the
    // exponent, which is the next binade's code).
    uint32_t v = abs - ((127u - F::kBias) << 23);
    v += (1u << (kDrop - 1)) - 1u + ((v >> kDrop) & 1u);
    code = v >> kDrop;
    if (code > F::kMaxCode) return static_cast<uint8_t>(sign | overflow);
  } else {
    // Subnormal (or zero): |x| / 2^(1 - bias - M) rounded to an integer, which is the code
    // (rounding up to 2^M lands on the smallest normal's code). f32 subnormals are far below.
    const uint32_t exp = abs >> 23;
    const uint32_t shift = 151u - F::kBias - F::kMan - exp;  // |x| / unit = man >> shift
    if (exp == 0 || shift > 24) return static_cast<uint8_t>(sign);
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    code = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (code & 1u))) ++code;
  }
  return static_cast<uint8_t>(sign | code);
}

template <class F>
ZT_HOST_DEVICE inline float decode(uint8_t b) {
  constexpr uint32_t kExpMask = (0x7fu >> F::kMan);
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> F::kMan) & kExpMask;
  const uint32_t man = b & ((1u << F::kMan) - 1u);
  if (exp == kExpMask) {
    if (F::kOverflowCode == 0x7fu) {  // E4M3: only S.1111.111 is special (NaN)
      if (man == (1u << F::kMan) - 1u) return float_of(sign | 0x7fc00000u);
    } else {
      return float_of(sign | (man == 0 ? 0x7f800000u : 0x7fc00000u));
    }
  }
  if (exp == 0) {
    // k * 2^(1 - bias - M), exact in f32.
    const float v = static_cast<float>(man) * float_of((127u + 1u - F::kBias - F::kMan) << 23);
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 127u - F::kBias) << 23) | (man << (23 - F::kMan)));
}

}  // namespace fp8_detail

ZT_HOST_DEVICE inline float to_f32(f8e4m3 v) { return fp8_detail::decode<fp8_detail::E4M3>(v.bits); }
ZT_HOST_DEVICE inline float to_f32(f8e5m2 v) { return fp8_detail::decode<fp8_detail::E5M2>(v.bits); }
ZT_HOST_DEVICE inline f8e4m3 to_f8e4m3(float f, Saturation sat) {
  return f8e4m3{fp8_detail::encode<fp8_detail::E4M3>(f, sat)};
}
ZT_HOST_DEVICE inline f8e5m2 to_f8e5m2(float f, Saturation sat) {
  return f8e5m2{fp8_detail::encode<fp8_detail::E5M2>(f, sat)};
}

// The largest finite magnitudes (what Saturate clamps to; FP8 recipes scale amax to them).
inline constexpr float kF8E4M3Max = 448.0f;
inline constexpr float kF8E5M2Max = 57344.0f;

}  // namespace zt
