// CPU pointwise kernels and bulk dtype staging (see elementwise.h).
//
// Accumulation rule: add (=), add_inplace / accumulate_f32 (+=, computed in f32, rounded
// once to the destination dtype), scale_inplace (in place). sum_of_squares accumulates in
// double over fixed chunks combined in chunk order: bitwise the same for any thread count.
// bf16/f16 are processed in blocks: load to f32, compute, store back; f16 uses the F16C
// instructions (round to nearest even, same results as core/dtype.h's to_f16).
#include "backend/cpu/elementwise.h"
#include "backend/elementwise_kernels.h"
#include "core/dtype_dispatch.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace zt::cpu {
namespace {

constexpr int64_t kBlock = 1024;           // elements staged in f32 at a time
constexpr int64_t kParallelMin = 1 << 15;  // below this, one thread
constexpr int64_t kChunk = 1 << 16;        // sum_of_squares / all_finite chunk

template <class T>
inline void load_block(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, bf16>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
  } else {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) dst[i] = to_f32(src[i]);
  }
}

template <class T>
inline void store_block(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, bf16>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
  } else {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
#endif
    for (; i < n; ++i) dst[i] = to_f16(src[i]);
  }
}

inline int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

}  // namespace

template <class T>
void convert_to_f32(const T* src, float* dst, int64_t n) {
  const int64_t nb = num_blocks(n, kBlock);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s = b * kBlock, len = std::min(kBlock, n - s);
    load_block(src + s, dst + s, len);
  }
}

template <class T>
void accumulate_f32(T* dst, const float* src, int64_t n) {
  const int64_t nb = num_blocks(n, kBlock);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s = b * kBlock, len = std::min(kBlock, n - s);
    if constexpr (std::is_same_v<T, float>) {
      float* d = dst + s;
      const float* x = src + s;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) d[i] += x[i];
    } else {
      alignas(64) float buf[kBlock];
      load_block(dst + s, buf, len);
      const float* x = src + s;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) buf[i] += x[i];
      store_block(buf, dst + s, len);
    }
  }
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n) {
  const int64_t nb = num_blocks(n, kBlock);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t s = k * kBlock, len = std::min(kBlock, n - s);
    if constexpr (std::is_same_v<T, float>) {
      // out may alias a or b exactly (same pointer), which is safe element by element.
      for (int64_t i = 0; i < len; ++i) out[s + i] = a[s + i] + b[s + i];
    } else {
      alignas(64) float fa[kBlock], fb[kBlock];
      load_block(a + s, fa, len);
      load_block(b + s, fb, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) fa[i] += fb[i];
      store_block(fa, out + s, len);
    }
  }
}

template <class A, class X>
void add_inplace(A* acc, const X* x, int64_t n) {
  if constexpr (std::is_same_v<X, float>) {
    accumulate_f32(acc, x, n);
  } else {
    const int64_t nb = num_blocks(n, kBlock);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t k = 0; k < nb; ++k) {
      const int64_t s = k * kBlock, len = std::min(kBlock, n - s);
      alignas(64) float fa[kBlock], fx[kBlock];
      load_block(acc + s, fa, len);
      load_block(x + s, fx, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) fa[i] += fx[i];
      store_block(fa, acc + s, len);
    }
  }
}

template <class T>
void scale_inplace(T* x, float alpha, int64_t n) {
  const int64_t nb = num_blocks(n, kBlock);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t s = k * kBlock, len = std::min(kBlock, n - s);
    if constexpr (std::is_same_v<T, float>) {
      float* p = x + s;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) p[i] *= alpha;
    } else {
      alignas(64) float f[kBlock];
      load_block(x + s, f, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) f[i] *= alpha;
      store_block(f, x + s, len);
    }
  }
}

template <class T>
double sum_of_squares(const T* x, int64_t n) {
  const int64_t nc = num_blocks(n, kChunk);
  std::vector<double> partial(static_cast<size_t>(nc), 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t s0 = c * kChunk, e0 = std::min(n, s0 + kChunk);
    double acc = 0.0;
    for (int64_t s = s0; s < e0; s += kBlock) {
      const int64_t len = std::min(kBlock, e0 - s);
      const float* f;
      alignas(64) float buf[kBlock];
      if constexpr (std::is_same_v<T, float>) {
        f = x + s;
      } else {
        load_block(x + s, buf, len);
        f = buf;
      }
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < len; ++i) acc += static_cast<double>(f[i]) * static_cast<double>(f[i]);
    }
    partial[static_cast<size_t>(c)] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

template <class T>
bool all_finite(const T* x, int64_t n) {
  const int64_t nc = num_blocks(n, kChunk);
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > kParallelMin)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t s = c * kChunk, e = std::min(n, s + kChunk);
    int local = 0;
    if constexpr (std::is_same_v<T, float>) {
#pragma omp simd reduction(| : local)
      for (int64_t i = s; i < e; ++i) local |= ((f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u);
    } else {
      constexpr uint16_t mask = std::is_same_v<T, bf16> ? 0x7f80u : 0x7c00u;
#pragma omp simd reduction(| : local)
      for (int64_t i = s; i < e; ++i) local |= ((x[i].bits & mask) == mask);
    }
    bad |= local;
  }
  return bad == 0;
}

#define ZT_INST_UNARY(T)                                      \
  template void convert_to_f32<T>(const T*, float*, int64_t); \
  template void accumulate_f32<T>(T*, const float*, int64_t); \
  template void add<T>(T*, const T*, const T*, int64_t);      \
  template void scale_inplace<T>(T*, float, int64_t);         \
  template double sum_of_squares<T>(const T*, int64_t);       \
  template bool all_finite<T>(const T*, int64_t);
ZT_INST_UNARY(float)
ZT_INST_UNARY(bf16)
ZT_INST_UNARY(f16)
#undef ZT_INST_UNARY

#define ZT_INST_ADD(A, X) template void add_inplace<A, X>(A*, const X*, int64_t);
ZT_INST_ADD(float, float)
ZT_INST_ADD(float, bf16)
ZT_INST_ADD(float, f16)
ZT_INST_ADD(bf16, float)
ZT_INST_ADD(bf16, bf16)
ZT_INST_ADD(bf16, f16)
ZT_INST_ADD(f16, float)
ZT_INST_ADD(f16, bf16)
ZT_INST_ADD(f16, f16)
#undef ZT_INST_ADD

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add(static_cast<T*>(out.data()), static_cast<const T*>(a.data()), static_cast<const T*>(b.data()), out.numel());
  });
}

void add_inplace(const Tensor& acc, const Tensor& x) {
  dispatch_float(acc.dtype(), [&](auto atag) {
    dispatch_float(x.dtype(), [&](auto xtag) {
      using A = decltype(atag);
      using X = decltype(xtag);
      add_inplace(static_cast<A*>(acc.data()), static_cast<const X*>(x.data()), acc.numel());
    });
  });
}

void scale_inplace(const Tensor& x, float alpha) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scale_inplace(static_cast<T*>(x.data()), alpha, x.numel());
  });
}

double sum_of_squares(const Tensor& x) {
  return dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return sum_of_squares(static_cast<const T*>(x.data()), x.numel());
  });
}

bool all_finite(const Tensor& x) {
  return dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return all_finite(static_cast<const T*>(x.data()), x.numel());
  });
}

}  // namespace zt::cpu
