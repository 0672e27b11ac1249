// Element types and their conversions. bf16/f16 are storage types: arithmetic happens in
// f32 after a conversion. Conversions to bf16/f16 round to nearest, ties to even, keep
// inf, turn every NaN into a quiet NaN, and (f16) produce subnormals and overflow to inf.
// F8E4M3 and F8E5M2 (core/fp8.h) are storage only: no op computes in them; they are
// converted to and from the compute dtypes (ops/fp8.h with a scale and a saturation
// choice; convert() and Tensor::copy_from as torch's .to(): scale 1, no saturation).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/fp8.h"

namespace zt {

// New values go at the end: a DType's number is not written anywhere, but keeping the
// order keeps every table indexed by it valid.
enum class DType : uint8_t { F32, BF16, F16, I32, I64, F8E4M3, F8E5M2 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ..., "f8_e4m3", "f8_e5m2"
// The compute floating dtypes: f32, bf16, f16 (ops take them; fp8 is not among them).
bool is_floating(DType dtype);
bool is_fp8(DType dtype);  // F8E4M3 or F8E5M2
// Parses our names and the common spellings ("float32", "bfloat16", "fp16", "half",
// "torch.float16", "float8_e4m3fn", "float8_e5m2", safetensors' "F32"/"BF16"/"F16"/"I32"/
// "I64"/"F8_E4M3"/"F8_E5M2"). Throws BadInput.
DType parse_dtype(const std::string& name);

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_f32(bf16 h) { return bits_f32(static_cast<uint32_t>(h.bits) << 16); }

inline bf16 to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline float to_f32(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  const uint32_t man = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // Subnormal: value = man * 2^-24, exact in f32.
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline f16 to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: value / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return f16{sign};  // below half the smallest subnormal: zero
    const uint32_t exp = abs >> 23;
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    // value / 2^-24 = man * 2^(exp - 126): drop (126 - exp) bits, 14..24 here.
    const uint32_t shift = 126u - exp;
    uint32_t result = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (result & 1u))) ++result;
    return f16{static_cast<uint16_t>(sign | result)};
  }
  // Normal: rebias exponent 127 -> 15, round the 23-bit mantissa to 10 bits.
  uint32_t v = abs - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return f16{static_cast<uint16_t>(sign | (v >> 13))};
}

// Generic load/store between a storage type and f32, used by kernels templated on it.
inline float load_f32(float v) { return v; }
inline float load_f32(bf16 v) { return to_f32(v); }
inline float load_f32(f16 v) { return to_f32(v); }
inline float load_f32(f8e4m3 v) { return to_f32(v); }
inline float load_f32(f8e5m2 v) { return to_f32(v); }
template <class T>
inline T store_as(float v);
template <>
inline float store_as<float>(float v) {
  return v;
}
template <>
inline bf16 store_as<bf16>(float v) {
  return to_bf16(v);
}
template <>
inline f16 store_as<f16>(float v) {
  return to_f16(v);
}
// As torch's .to(float8_*): round to nearest even, no saturation.
template <>
inline f8e4m3 store_as<f8e4m3>(float v) {
  return to_f8e4m3(v, Saturation::NonSaturating);
}
template <>
inline f8e5m2 store_as<f8e5m2>(float v) {
  return to_f8e5m2(v, Saturation::NonSaturating);
}

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<f8e4m3> {
  static constexpr DType value = DType::F8E4M3;
};
template <>
struct dtype_of<f8e5m2> {
  static constexpr DType value = DType::F8E5M2;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};

// Calls fn(T{}) with T the C++ type of a compute floating dtype (float, bf16, f16); any
// other dtype (fp8 included: convert it first) is an error naming it.
template <class Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn);

// Converts n elements between any two dtypes (float<->int conversions truncate toward zero;
// to fp8 as torch's .to(): nearest even, a value too large becomes NaN (E4M3) or inf (E5M2)).
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace zt

#include "core/dtype_dispatch.h"
