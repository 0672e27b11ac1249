// Internal to backend/cpu: the pointwise kernels on raw pointers (behind the Tensor kernels
// of backend/elementwise_kernels.h), plus the bulk dtype helpers the other CPU kernels use
// to stage bf16/f16 parameters in f32.
//
// Accumulation rule: add writes out (=); add_inplace and accumulate_f32 add into their
// destination (+=) in f32 and round once to the destination's dtype; scale_inplace
// rescales in place. sum_of_squares accumulates in double over fixed 64K-element chunks
// summed in order, so its result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zt::cpu {

// dst[i] = f32(src[i]) for i < n (parallel for large n).
template <class T>
void convert_to_f32(const T* src, float* dst, int64_t n);
// dst[i] = T(dst[i] + src[i]) (one rounding to T).
template <class T>
void accumulate_f32(T* dst, const float* src, int64_t n);

// out = a + b (out may alias a or b).
template <class T>
void add(T* out, const T* a, const T* b, int64_t n);
// acc += x.
template <class A, class X>
void add_inplace(A* acc, const X* x, int64_t n);
// x *= alpha.
template <class T>
void scale_inplace(T* x, float alpha, int64_t n);
template <class T>
double sum_of_squares(const T* x, int64_t n);
template <class T>
bool all_finite(const T* x, int64_t n);

}  // namespace zt::cpu
