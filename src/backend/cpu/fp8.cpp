// CPU FP8 conversions and amax (see backend/fp8_kernels.h, ops/fp8.h). Each element is one
// f32 multiply by the scale and core/fp8.h's bit code, the functions the CUDA kernels call,
// so both backends give the same bits. amax compares |x| as unsigned bit patterns: for
// non-negative floats their order is the numbers' order, and a NaN's pattern is above
// infinity's, so a NaN wins as it must; the max of integers does not depend on the thread
// count or order.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/fp8_kernels.h"
#include "core/dtype_dispatch.h"

namespace zt::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this, one thread

template <class Q>
Q encode(float v, Saturation sat) {
  if constexpr (std::is_same_v<Q, f8e4m3>)
    return to_f8e4m3(v, sat);
  else
    return to_f8e5m2(v, sat);
}

template <class Q, class T>
void quantize(Q* out, const T* inp, int64_t n, float scale, Saturation sat) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = encode<Q>(load_f32(inp[i]) * scale, sat);
}

template <class T, class Q>
void dequantize(T* out, const Q* inp, int64_t n, float scale) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = store_as<T>(to_f32(inp[i]) * scale);
}

float scalar(const Tensor& t) { return *static_cast<const float*>(t.data()); }

}  // namespace

void fp8_quantize(const Tensor& out, const Tensor& inp, const Tensor& scale, Saturation saturation) {
  const float s = scalar(scale);
  dispatch_fp8(out.dtype(), [&](auto q) {
    dispatch_float(inp.dtype(), [&](auto t) {
      using Q = decltype(q);
      using T = decltype(t);
      quantize(static_cast<Q*>(out.data()), static_cast<const T*>(inp.data()), inp.numel(), s, saturation);
    });
  });
}

void fp8_dequantize(const Tensor& out, const Tensor& inp, const Tensor& scale) {
  const float s = scalar(scale);
  dispatch_fp8(inp.dtype(), [&](auto q) {
    dispatch_float(out.dtype(), [&](auto t) {
      using Q = decltype(q);
      using T = decltype(t);
      dequantize(static_cast<T*>(out.data()), static_cast<const Q*>(inp.data()), inp.numel(), s);
    });
  });
}

void amax(const Tensor& out, const Tensor& inp) {
  uint32_t best = 0;
  dispatch_float(inp.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = static_cast<const T*>(inp.data());
    const int64_t n = inp.numel();
#pragma omp parallel for if (n >= kParallelMin) schedule(static) reduction(max : best)
    for (int64_t i = 0; i < n; ++i) best = std::max(best, f32_bits(load_f32(p[i])) & 0x7fffffffu);
  });
  *static_cast<float*>(out.data()) = bits_f32(best);
}

}  // namespace zt::cpu
