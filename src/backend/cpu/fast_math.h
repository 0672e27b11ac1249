// Shared by the CPU kernels that vectorise exponentials and parallelise above BLAS.
#pragma once
#include <cblas.h>

#include <cstdint>
#include <cstring>

// The loops that call exp_approx need -fno-trapping-math to be if-converted and
// vectorised (FP exception flags are never read here); functions carry that option.
#if defined(__GNUC__) && !defined(__clang__)
#define ZT_VECTOR_MATH __attribute__((optimize("no-trapping-math")))
#else
#define ZT_VECTOR_MATH
#endif

extern "C" int openblas_get_num_threads(void);

namespace zt::cpu {

// exp(x) for x <= 88 (callers use x <= 0), ~1e-7 relative (~2 ulp), vectorisable (no libm
// call). NaN propagates.
ZT_VECTOR_MATH inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  float n = x * 1.44269504088896341f + 12582912.0f;
  n -= 12582912.0f;  // round to nearest integer
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const uint32_t e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof(scale));
  return p * scale;
}

// Runs OpenBLAS single-threaded while alive: kernels that parallelise over heads or
// vocabulary slices call sgemm from every thread, and this OpenBLAS (pthreads) serialises
// concurrent threaded calls.
class BlasSingleThread {
 public:
  BlasSingleThread() : saved_(openblas_get_num_threads()) {
    if (saved_ > 1) openblas_set_num_threads(1);
  }
  ~BlasSingleThread() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;

 private:
  int saved_;
};

}  // namespace zt::cpu
