// Element types and vector access for the row/column kernels (norm, embedding, RoPE):
// the device type of each storage dtype, f32 conversions that round as core/dtype.h does
// for finite values, and loads/stores of V consecutive elements (16-byte words when V > 1).
//
// Device-only: include from .cu files. The helpers live in an unnamed namespace, so each
// .cu keeps its own copy (no device linking needed).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace zt::cuda {
namespace {

template <class T>
struct Tag {
  using type = T;
};
// The device type of a core storage type (bit-compatible).
template <class T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceType<f16> {
  using type = __half;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Bit-level conversions between f32 and a storage type's bits (in the low bits of a word):
// well-defined (no type punning), the same roundings as core/dtype.h for finite values.
template <class T>
struct Bits;
template <>
struct Bits<float> {
  static __device__ __forceinline__ float load(uint32_t b) { return __uint_as_float(b); }
  static __device__ __forceinline__ uint32_t store(float v) { return __float_as_uint(v); }
};
template <>
struct Bits<__nv_bfloat16> {
  static __device__ __forceinline__ float load(uint32_t b) {
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(b)));
  }
  static __device__ __forceinline__ uint32_t store(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
template <>
struct Bits<__half> {
  static __device__ __forceinline__ float load(uint32_t b) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
  }
  static __device__ __forceinline__ uint32_t store(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

// V consecutive elements at p as f32. V == 1: one scalar load; otherwise 16-byte loads, p
// must be 16-byte aligned and V * sizeof(T) a multiple of 16. Elements sit little-endian
// in the 32-bit words (two 16-bit elements per word, element 0 in the low half).
template <int V, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = to_float(*p);
  } else {
    static_assert(V * sizeof(T) % 16 == 0, "vector loads move whole 16-byte words");
    constexpr int kPer = 16 / sizeof(T);  // elements per 16-byte word
#pragma unroll
    for (int w = 0; w < V / kPer; ++w) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[w];
      const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if constexpr (sizeof(T) == 4) {
          v[w * kPer + k] = Bits<T>::load(u[k]);
        } else {
          v[w * kPer + k] = Bits<T>::load((u[k / 2] >> (16 * (k % 2))) & 0xffffu);
        }
      }
    }
  }
}

// Stores V f32 values at p rounded to T (same alignment rules as load_vec).
template <int V, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[V]) {
  if constexpr (V == 1) {
    *p = from_float<T>(v[0]);
  } else {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int w = 0; w < V / kPer; ++w) {
      uint32_t u[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const uint32_t bits = Bits<T>::store(v[w * kPer + k]);
        if constexpr (sizeof(T) == 4) {
          u[k] = bits;
        } else {
          u[k / 2] |= bits << (16 * (k % 2));
        }
      }
      reinterpret_cast<uint4*>(p)[w] = make_uint4(u[0], u[1], u[2], u[3]);
    }
  }
}

}  // namespace
}  // namespace zt::cuda
