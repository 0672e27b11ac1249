// Pointwise helpers on the GPU; see backend/elementwise_kernels.h.
//
// Accumulation rule: add (=), add_inplace (+=, in f32, one rounding to acc's dtype),
// scale_inplace (in place). Each is a single f32 operation per element followed by the
// rounding of core/dtype.h, so the results are bitwise the CPU backend's.
//
// Shape of the work: a thread handles chunks of 8 consecutive elements (one 16-byte
// vector of 16-bit values, two of f32) in a grid-stride loop of 256-thread blocks. When
// every pointer of a call is 16-byte aligned, full chunks move as 16-byte vectors;
// otherwise (misaligned views) and for the last partial chunk, elements move one by one.
// Outputs may alias inputs element for element: a thread reads its chunk before writing it.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/chunked.cuh"
#include "backend/elementwise_kernels.h"
#include "backend/cuda_api.h"
#include "core/dtype_dispatch.h"

namespace zt::cuda {
namespace {

// ---- the ops ------------------------------------------------------------------------------

template <class T>
struct AddOp {
  T* out;
  const T* a;
  const T* b;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float x[kChunk], y[kChunk];
    load_chunk(a, i, count, vec, x);
    load_chunk(b, i, count, vec, y);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) x[k] += y[k];
    store_chunk(out, i, count, vec, x);
  }
};

template <class A, class X>
struct AddInplaceOp {
  A* acc;
  const X* x;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float s[kChunk], d[kChunk];
    load_chunk(acc, i, count, vec, s);
    load_chunk(x, i, count, vec, d);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) s[k] += d[k];
    store_chunk(acc, i, count, vec, s);
  }
};

template <class T>
struct ScaleOp {
  T* x;
  float alpha;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float f[kChunk];
    load_chunk(x, i, count, vec, f);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) f[k] *= alpha;
    store_chunk(x, i, count, vec, f);
  }
};

// Flags (*bad = 1) any inf or nan. Widening to f32 keeps inf and nan of every dtype.
template <class T>
struct NonFiniteOp {
  const T* x;
  int* bad;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float f[kChunk];
    load_chunk(x, i, count, vec, f);
    bool finite = true;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) finite &= (__float_as_uint(f[k]) & 0x7f800000u) != 0x7f800000u;
    if (!finite) *bad = 1;  // every writer stores the same value
  }
};

// Sum of v over the block (blockDim.x == kThreads); the total is valid in thread 0. The
// order of additions is fixed by the thread layout, so the result is reproducible.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// partial[block] = sum over the block's chunks of x^2, each element widened to double first.
template <class T>
__global__ void sum_of_squares_partial_kernel(const T* x, int64_t n, bool aligned, double* partial) {
  const int64_t chunks = chunks_of(n);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = 0.0;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t i = c * kChunk;
    const int count = static_cast<int>(n - i < kChunk ? n - i : kChunk);
    float f[kChunk];
    load_chunk(x, i, count, aligned && count == kChunk, f);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) acc += static_cast<double>(f[k]) * static_cast<double>(f[k]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *total = sum of partial[0, count), by one block; with accumulate, *total += that sum.
__global__ void sum_partials_kernel(const double* partial, int count, double* total, bool accumulate) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *total = accumulate ? *total + acc : acc;
}

// Partial sums per block; a fixed cap keeps the grid (and so the summation order) a function
// of n alone, and 1024 blocks of 256 threads already cover an H200 several times.
constexpr int64_t kReduceBlocks = 1024;

}  // namespace

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  const bool aligned = aligned16(out.data()) && aligned16(a.data()) && aligned16(b.data());
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(
        AddOp<T>{static_cast<T*>(out.data()), static_cast<const T*>(a.data()), static_cast<const T*>(b.data())},
        out.numel(), aligned);
  });
}

void add_inplace(const Tensor& acc, const Tensor& x) {
  const bool aligned = aligned16(acc.data()) && aligned16(x.data());
  dispatch_float(acc.dtype(), [&](auto atag) {
    dispatch_float(x.dtype(), [&](auto xtag) {
      using A = decltype(atag);
      using X = decltype(xtag);
      launch_chunked(AddInplaceOp<A, X>{static_cast<A*>(acc.data()), static_cast<const X*>(x.data())}, acc.numel(),
                     aligned);
    });
  });
}

void scale_inplace(const Tensor& x, float alpha) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(ScaleOp<T>{static_cast<T*>(x.data()), alpha}, x.numel(), aligned16(x.data()));
  });
}

namespace {
// Queues the sum of squares of x (n > 0) into *out (= or +=); the partial sums live in a
// scratch block that goes back to the stream-ordered cache when this returns.
void queue_sum_of_squares(const Tensor& x, double* out, bool accumulate) {
  const int64_t n = x.numel();
  const unsigned blocks = grid_for(chunks_of(n), kReduceBlocks);
  Buffer scratch(blocks * sizeof(double), x.device());
  double* partial = static_cast<double*>(scratch.data());
  const cudaStream_t stream = compute_stream();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sum_of_squares_partial_kernel<T>
        <<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x.data()), n, aligned16(x.data()), partial);
    ZT_CUDA_CHECK_LAST();
  });
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partial, static_cast<int>(blocks), out, accumulate);
  ZT_CUDA_CHECK_LAST();
}
}  // namespace

double sum_of_squares(const Tensor& x) {
  if (x.numel() == 0) return 0.0;
  Buffer total(sizeof(double), x.device());
  queue_sum_of_squares(x, static_cast<double*>(total.data()), false);
  double result = 0.0;
  copy_to_host(&result, total.data(), sizeof(double));  // waits for the kernels above
  return result;
}

void sum_of_squares_accumulate(const Tensor& x, double* acc) {
  if (x.numel() == 0) return;  // adds 0.0: nothing to queue
  queue_sum_of_squares(x, acc, true);
}

bool all_finite(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return true;
  Buffer flag(sizeof(int), x.device());
  flag.zero();  // cudaMemsetAsync on the compute stream, before the kernel
  int* bad = static_cast<int*>(flag.data());
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(NonFiniteOp<T>{static_cast<const T*>(x.data()), bad}, n, aligned16(x.data()));
  });
  int host_bad = 0;
  copy_to_host(&host_bad, bad, sizeof(int));
  return host_bad == 0;
}

}  // namespace zt::cuda
