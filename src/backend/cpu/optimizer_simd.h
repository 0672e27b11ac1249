// The vector type of one optimizer instruction set, for optimizer_loops.h (included by it
// only, in the unit that defines ZT_CPU_OPT_ISA). Arithmetic is written with GCC's vector
// extensions (+, *, /, ?:) and explicit fused multiply-adds; the units are compiled with
// -ffp-contract=off, so every FMA is one the source asks for and both widths round alike.
// The operations the extensions lack are intrinsics: sqrt, fma and the f16 conversions.
//
// Everything here is in the instruction set's namespace: a shared inline function compiled
// with AVX-512 flags could be the copy the linker keeps for the whole program, and run on a
// CPU without AVX-512.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#if defined(__x86_64__)
// GCC 12 reports its own AVX-512 intrinsics (their `__Y = __Y` placeholder for the lanes a
// full mask overwrites) as uninitialised once inlined at -O3; the diagnostic belongs to the
// header's lines, so it is silenced for them only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif

#ifndef ZT_CPU_OPT_ISA
#error "optimizer_simd.h: define ZT_CPU_OPT_ISA (avx2 or avx512) first"
#endif

namespace zt::cpu::ZT_CPU_OPT_ISA {

#if ZT_CPU_OPT_AVX512
#if !defined(__AVX512F__) || !defined(__AVX512BW__)
#error "the AVX-512 optimizer unit needs -mavx512f -mavx512bw (CMakeLists.txt)"
#endif
constexpr int kWidth = 16;
#else
constexpr int kWidth = 8;
#endif

// Lanes of f32 and u32 (bit patterns), and the 16-bit storage of one vector of bf16/f16.
typedef float VecF __attribute__((vector_size(kWidth * 4)));
typedef uint32_t VecU __attribute__((vector_size(kWidth * 4)));
typedef int32_t VecI __attribute__((vector_size(kWidth * 4)));
typedef uint16_t VecU16 __attribute__((vector_size(kWidth * 2)));

// Unaligned loads and stores through memcpy (one vmovups). bf16 and f16 convert exactly as
// core/dtype.h's to_f32 / to_bf16 / to_f16: round to nearest even, NaNs made quiet.
inline VecF load(const float* p) {
  VecF x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline void store(float* p, VecF x) { std::memcpy(p, &x, sizeof x); }

// bf16 -> f32 is the 16 bits moved up; f32 -> bf16 rounds the bit pattern in 32-bit lanes,
// then narrows (the narrowing and widening are intrinsics: GCC's __builtin_convertvector
// spends extra shuffles on them).
inline VecU widen(VecU16 h);
inline VecU16 narrow(VecU u);  // u < 2^16 in every lane
inline VecF load(const bf16* p) {
  VecU16 h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<VecF>(widen(h) << 16);
}
inline void store(bf16* p, VecF x) {
  const VecU u = reinterpret_cast<VecU>(x);
  const VecU rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // overflow carries into inf
  const VecU quiet_nan = (u >> 16) | 0x0040u;
  const VecI is_nan = reinterpret_cast<VecI>(u & 0x7fffffffu) > 0x7f800000;
  const VecU16 h = narrow(is_nan ? quiet_nan : rounded);
  std::memcpy(static_cast<void*>(p), &h, sizeof h);
}

#if defined(__x86_64__)
// F16C / AVX-512 conversions: IEEE round to nearest even with subnormals, inf and overflow
// to inf; a NaN keeps its sign and top payload bits and becomes quiet, as to_f16 does. The
// load also makes a signalling NaN quiet (to_f32 does not), which no result can show: every
// loaded gradient is multiplied by grad_scale first, and that quiets it anyway.
#if ZT_CPU_OPT_AVX512
inline VecF splat(float x) { return reinterpret_cast<VecF>(_mm512_set1_ps(x)); }
inline VecU widen(VecU16 h) { return reinterpret_cast<VecU>(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(h))); }
inline VecU16 narrow(VecU u) { return reinterpret_cast<VecU16>(_mm512_cvtepi32_epi16(reinterpret_cast<__m512i>(u))); }
inline VecF load(const f16* p) {
  return reinterpret_cast<VecF>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
inline void store(f16* p, VecF x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(reinterpret_cast<__m512>(x), _MM_FROUND_TO_NEAREST_INT));
}
inline VecF sqrt(VecF x) { return reinterpret_cast<VecF>(_mm512_sqrt_ps(reinterpret_cast<__m512>(x))); }
inline VecF fma(VecF a, VecF b, VecF c) {
  return reinterpret_cast<VecF>(
      _mm512_fmadd_ps(reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b), reinterpret_cast<__m512>(c)));
}
#else
inline VecF splat(float x) { return reinterpret_cast<VecF>(_mm256_set1_ps(x)); }
inline VecU widen(VecU16 h) { return reinterpret_cast<VecU>(_mm256_cvtepu16_epi32(reinterpret_cast<__m128i>(h))); }
inline VecU16 narrow(VecU u) {
  // packus works within 128-bit halves: lanes 0-3 and 4-7 end up in quadwords 0 and 2.
  const __m256i packed = _mm256_packus_epi32(reinterpret_cast<__m256i>(u), reinterpret_cast<__m256i>(u));
  return reinterpret_cast<VecU16>(_mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
}
inline VecF load(const f16* p) {
  return reinterpret_cast<VecF>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline void store(f16* p, VecF x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(reinterpret_cast<__m256>(x), _MM_FROUND_TO_NEAREST_INT));
}
inline VecF sqrt(VecF x) { return reinterpret_cast<VecF>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x))); }
inline VecF fma(VecF a, VecF b, VecF c) {
  return reinterpret_cast<VecF>(
      _mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(c)));
}
#endif
#else
// Other CPUs: lane by lane (the compiler may still vectorise these).
inline VecF splat(float x) {
  VecF v;
  for (int i = 0; i < kWidth; ++i) v[i] = x;
  return v;
}
inline VecU widen(VecU16 h) { return __builtin_convertvector(h, VecU); }
inline VecU16 narrow(VecU u) { return __builtin_convertvector(u, VecU16); }
inline VecF load(const f16* p) {
  VecF x;
  for (int i = 0; i < kWidth; ++i) x[i] = to_f32(p[i]);
  return x;
}
inline void store(f16* p, VecF x) {
  for (int i = 0; i < kWidth; ++i) p[i] = to_f16(x[i]);
}
inline VecF sqrt(VecF x) {
  for (int i = 0; i < kWidth; ++i) x[i] = __builtin_sqrtf(x[i]);
  return x;
}
inline VecF fma(VecF a, VecF b, VecF c) {
  for (int i = 0; i < kWidth; ++i) a[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return a;
}
#endif

// a*b + c with one rounding; a broadcast.
inline VecF fma(float a, VecF b, VecF c) { return fma(splat(a), b, c); }

}  // namespace zt::cpu::ZT_CPU_OPT_ISA
