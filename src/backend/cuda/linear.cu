// CUDA linear layer (see backend/linear_kernels.h) and the element-wise kernels of matmul.h.
//
// Accumulation rule: out (=), dinp (=), dweight (+=), dbias (+=).
//
// Products (row-major; matmul.h maps them onto cuBLASLt's column-major):
//   forward   out[N, O]  = inp[N, I] op(W)          op(W) = W^T for OutIn [O, I], W for InOut [I, O]
//             + bias: CUBLASLT_EPILOGUE_BIAS (one bias value per output column)
//   dinp      dinp[N, I] = dout[N, O] op'(W)        op'(W) = W for OutIn, W^T for InOut; beta = 0
//   dweight   OutIn: dW[O, I] += dout^T inp;  InOut: dW[I, O] += inp^T dout;  beta = 1 in place
//   dbias     dbias[O] += sum over rows of dout: column_sums_into (two-pass, fixed order)
// dbias is a kernel rather than CUBLASLT_EPILOGUE_BGRADB/BGRADA because the epilogue writes
// (=) the bias gradient in the output's type, while the rule is += with one rounding.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/linear_kernels.h"
#include "backend/cuda/matmul.h"
#include "core/dtype_dispatch.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }
__device__ __forceinline__ float to_float(f16 v) { return __half2float(__ushort_as_half(v.bits)); }

template <class T>
__device__ __forceinline__ T from_float(float f);
template <>
__device__ __forceinline__ float from_float<float>(float f) {
  return f;
}
// core/dtype.h's to_bf16 bit for bit: round to nearest even, NaN stays a quiet NaN.
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float f) {
  return f16{__half_as_ushort(__float2half_rn(f))};
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65536));
}

template <class T>
__global__ void accumulate_kernel(T* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<T>(to_float(dst[i]) + src[i]);
}

template <class T>
__global__ void broadcast_rows_kernel(T* __restrict__ d, const T* __restrict__ bias, int64_t rows, int64_t cols,
                                      int64_t ld) {
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    d[r * ld + c] = bias[c];
  }
}

// Column sums, pass 1: block (32, 8) takes 32 columns of a slice of rows_per_split rows;
// thread (x, y) sums rows y, y + 8, ... of column x (a warp reads 32 consecutive columns of
// one row), then the 8 partial sums are added in order. partial[split, col].
constexpr int kSumCols = 32, kSumRows = 8;

template <class X>
__global__ void column_partial_kernel(const X* __restrict__ x, int64_t rows, int64_t cols, int64_t rows_per_split,
                                      float* __restrict__ partial) {
  __shared__ float acc_s[kSumRows][kSumCols + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = min(rows, r0 + rows_per_split);
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kSumRows) acc += to_float(x[r * cols + c]);
  acc_s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < kSumRows; ++k) t += acc_s[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = t;
  }
}

// Pass 2: dbias[c] += sum over splits of partial[s, c], in split order, one rounding.
template <class G>
__global__ void column_finish_kernel(G* __restrict__ dbias, const float* __restrict__ partial, int64_t splits,
                                     int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float t = 0.0f;
  for (int64_t s = 0; s < splits; ++s) t += partial[s * cols + c];
  dbias[c] = from_float<G>(to_float(dbias[c]) + t);
}

// Rows of a contiguous activation with `features` columns.
int64_t rows_of(const Tensor& t, int64_t features) { return features > 0 ? t.numel() / features : 0; }

}  // namespace

// ---- matmul.h's element-wise kernels ----

void accumulate_f32_into(void* dst, DType dst_dtype, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dst_dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_kernel<T><<<grid_for(static_cast<int64_t>(n)), kThreads, 0, stream>>>(static_cast<T*>(dst), src,
                                                                                     static_cast<int64_t>(n));
    ZT_CUDA_CHECK_LAST();
  });
}

void broadcast_rows(void* d, DType dtype, const void* bias, int64_t rows, int64_t cols, int64_t ld,
                    cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    broadcast_rows_kernel<T><<<grid_for(rows * cols), kThreads, 0, stream>>>(
        static_cast<T*>(d), static_cast<const T*>(bias), rows, cols, ld);
    ZT_CUDA_CHECK_LAST();
  });
}

void column_sums_into(void* dbias, DType dbias_dtype, const void* x, DType x_dtype, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  // Enough blocks to fill the GPU (about 1024), slices of at least 64 rows.
  const int64_t col_blocks = (cols + kSumCols - 1) / kSumCols;
  int64_t splits = std::clamp<int64_t>((1024 + col_blocks - 1) / col_blocks, 1, (rows + 63) / 64);
  splits = std::min<int64_t>(splits, 65535);
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  splits = (rows + rows_per_split - 1) / rows_per_split;
  Buffer partial(static_cast<size_t>(splits * cols) * sizeof(float), Device::cuda(context().device));
  float* p = static_cast<float*>(partial.data());
  dispatch_float(x_dtype, [&](auto tag) {
    using X = decltype(tag);
    const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
    column_partial_kernel<X>
        <<<grid, dim3(kSumCols, kSumRows), 0, stream>>>(static_cast<const X*>(x), rows, cols, rows_per_split, p);
    ZT_CUDA_CHECK_LAST();
  });
  dispatch_float(dbias_dtype, [&](auto tag) {
    using G = decltype(tag);
    column_finish_kernel<G><<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        static_cast<G*>(dbias), p, splits, cols);
    ZT_CUDA_CHECK_LAST();
  });
}

// ---- the linear layer ----

void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const int64_t N = rows_of(out, O);
  if (N == 0 || O == 0) return;
  const bool has_bias = bias.defined() && bias.data() != nullptr;
  const DType ct = act_weight_compute_dtype(inp.dtype(), weight.dtype());
  Buffer x_holder, w_holder;
  const void* x = device_as_dtype(inp.data(), inp.dtype(), ct, static_cast<size_t>(N * I), x_holder);
  const void* w = device_as_dtype(weight.data(), weight.dtype(), ct, static_cast<size_t>(O * I), w_holder);
  const MatrixRef a{x, ct, N, I};
  // op(W) = [I, O]: OutIn stores [O, I] (transposed), InOut stores [I, O].
  const MatrixRef b = in_out ? MatrixRef{w, ct, I, O} : MatrixRef{w, ct, O, I, 0, true};
  matmul_into(a, b, out.data(), out.dtype(), 0, /*accumulate=*/false, has_bias ? bias.data() : nullptr, bias.dtype());
}

void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const bool has_dinp = dinp.defined() && dinp.data() != nullptr;
  const bool has_dw = dweight.defined() && dweight.data() != nullptr;
  const bool has_db = dbias.defined() && dbias.data() != nullptr;
  const cudaStream_t stream = compute_stream();
  if (O == 0) {  // no outputs: dinp = 0, nothing to accumulate
    if (has_dinp && dinp.nbytes()) ZT_CUDA_CHECK(cudaMemsetAsync(dinp.data(), 0, dinp.nbytes(), stream));
    return;
  }
  const int64_t N = rows_of(dout, O);
  if (N == 0) return;

  if (has_dinp && I > 0) {
    const DType ct = act_weight_compute_dtype(dout.dtype(), weight.dtype());
    Buffer dy_holder, w_holder;
    const void* dy = device_as_dtype(dout.data(), dout.dtype(), ct, static_cast<size_t>(N * O), dy_holder);
    const void* w = device_as_dtype(weight.data(), weight.dtype(), ct, static_cast<size_t>(O * I), w_holder);
    // op'(W) = [O, I]: OutIn stores it as is, InOut stores [I, O] (transposed).
    const MatrixRef b = in_out ? MatrixRef{w, ct, I, O, 0, true} : MatrixRef{w, ct, O, I};
    matmul_into(MatrixRef{dy, ct, N, O}, b, dinp.data(), dinp.dtype(), 0, /*accumulate=*/false);
  }
  if (has_dw && I > 0) {
    const DType ct = act_act_compute_dtype(dout.dtype(), inp.dtype());
    Buffer dy_holder, x_holder;
    const void* dy = device_as_dtype(dout.data(), dout.dtype(), ct, static_cast<size_t>(N * O), dy_holder);
    const void* x = device_as_dtype(inp.data(), inp.dtype(), ct, static_cast<size_t>(N * I), x_holder);
    const MatrixRef dy_t{dy, ct, N, O, 0, true}, x_t{x, ct, N, I, 0, true};
    const MatrixRef dy_m{dy, ct, N, O}, x_m{x, ct, N, I};
    if (in_out) {
      matmul_into(x_t, dy_m, dweight.data(), dweight.dtype(), 0, /*accumulate=*/true);  // [I, O]
    } else {
      matmul_into(dy_t, x_m, dweight.data(), dweight.dtype(), 0, /*accumulate=*/true);  // [O, I]
    }
  }
  if (has_db) column_sums_into(dbias.data(), dbias.dtype(), dout.data(), dout.dtype(), N, O, stream);
}

}  // namespace zt::cuda
