// Activations on the GPU; see backend/activation_kernels.h.
//
// Accumulation rule: out, dinp, dgate, dup are overwritten (=).
// The formulas are those of backend/cpu/activation.cpp, term by term: GELU as
// x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (the tanh form without the cancellation
// of 1 + tanh(u) for negative x), sigmoid(z) = 1 / (1 + exp(-z)) with CUDA's expf (full
// precision; the kernels are bound by memory, not by the exponential).
//
// Shape of the work: a thread handles chunks of 8 consecutive elements (one 16-byte vector
// of bf16, two of f32) in a grid-stride loop of 256-thread blocks; misaligned pointers and
// partial chunks fall back to element accesses. SwiGLU walks [rows, F] matrices chunk by
// chunk within each row, so strided rows (column halves of a fused buffer) vectorise when
// their row strides keep 16-byte alignment. Outputs may alias inputs element for element:
// a thread loads all of its chunk's inputs before storing any output.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/activation_kernels.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/chunked.cuh"
#include "core/error.h"

namespace zt::cuda {
namespace {

// ---- the activations ----------------------------------------------------------------------

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

template <class T>
struct GeluForwardOp {
  T* out;
  const T* inp;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float x[kChunk];
    load_chunk(inp, i, count, vec, x);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float u = kGeluC * (x[k] + kGeluA * x[k] * x[k] * x[k]);
      x[k] = x[k] * sigmoid(2.0f * u);
    }
    store_chunk(out, i, count, vec, x);
  }
};

// d/dx [x s(2u)] = s + x s (1 - s) 2 u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class T>
struct GeluBackwardOp {
  T* dinp;
  const T* dout;
  const T* inp;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float x[kChunk], d[kChunk];
    load_chunk(inp, i, count, vec, x);
    load_chunk(dout, i, count, vec, d);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float u = kGeluC * (x[k] + kGeluA * x[k] * x[k] * x[k]);
      const float s = sigmoid(2.0f * u);
      const float du = kGeluC * (1.0f + 3.0f * kGeluA * x[k] * x[k]);
      d[k] = d[k] * (s + 2.0f * x[k] * s * (1.0f - s) * du);
    }
    store_chunk(dinp, i, count, vec, d);
  }
};

template <class T>
struct SiluForwardOp {
  T* out;
  const T* inp;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float x[kChunk];
    load_chunk(inp, i, count, vec, x);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) x[k] = x[k] * sigmoid(x[k]);
    store_chunk(out, i, count, vec, x);
  }
};

template <class T>
struct SiluBackwardOp {
  T* dinp;
  const T* dout;
  const T* inp;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float x[kChunk], d[kChunk];
    load_chunk(inp, i, count, vec, x);
    load_chunk(dout, i, count, vec, d);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float s = sigmoid(x[k]);
      d[k] = d[k] * (s * (1.0f + x[k] * (1.0f - s)));
    }
    store_chunk(dinp, i, count, vec, d);
  }
};

// ---- SwiGLU on [rows, F] matrices with row strides ----------------------------------------

// op(r, j, count, vec) for every chunk [j, j + count) of every row r; chunks never cross rows.
template <class Op>
__global__ void rows_kernel(Op op, int64_t rows, int64_t F, bool aligned) {
  const int64_t per_row = chunks_of(F);
  const int64_t chunks = rows * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t r = c / per_row;
    const int64_t j = (c - r * per_row) * kChunk;
    const int count = static_cast<int>(F - j < kChunk ? F - j : kChunk);
    op(r, j, count, aligned && count == kChunk);
  }
}

template <class T>
struct SwigluForwardOp {
  T* out;
  const T* gate;
  const T* up;
  int64_t ld_out, ld_gate, ld_up;
  __device__ void operator()(int64_t r, int64_t j, int count, bool vec) const {
    float g[kChunk], u[kChunk];
    load_chunk(gate + r * ld_gate, j, count, vec, g);
    load_chunk(up + r * ld_up, j, count, vec, u);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
    store_chunk(out + r * ld_out, j, count, vec, g);
  }
};

template <class T>
struct SwigluBackwardOp {
  T* dgate;
  T* dup;
  const T* dout;
  const T* gate;
  const T* up;
  int64_t ld_dgate, ld_dup, ld_dout, ld_gate, ld_up;
  __device__ void operator()(int64_t r, int64_t j, int count, bool vec) const {
    float d[kChunk], g[kChunk], u[kChunk];
    load_chunk(dout + r * ld_dout, j, count, vec, d);
    load_chunk(gate + r * ld_gate, j, count, vec, g);
    load_chunk(up + r * ld_up, j, count, vec, u);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float s = sigmoid(g[k]);
      const float dg = d[k] * u[k] * (s * (1.0f + g[k] * (1.0f - s)));
      u[k] = d[k] * (g[k] * s);  // du
      g[k] = dg;
    }
    store_chunk(dup + r * ld_dup, j, count, vec, u);
    store_chunk(dgate + r * ld_dgate, j, count, vec, g);
  }
};

// Elements between consecutive rows of a validated [..., F] view (ops/activation.cpp's rule).
int64_t row_stride(const Tensor& t, int64_t F) { return t.dim() == 1 ? F : t.strides()[t.dim() - 2]; }

// A row-strided operand keeps 16-byte vectors aligned on every row when its base is aligned
// and its row stride is a multiple of 16 bytes.
bool rows_aligned(const Tensor& t, int64_t ld, size_t elem_size) {
  return aligned16(t.data()) && (static_cast<size_t>(ld) * elem_size) % 16 == 0;
}

template <class Op>
void launch_rows(const Op& op, int64_t rows, int64_t F, bool aligned) {
  if (rows <= 0 || F <= 0) return;
  rows_kernel<<<grid_for(rows * chunks_of(F)), kThreads, 0, compute_stream()>>>(op, rows, F, aligned);
  ZT_CUDA_CHECK_LAST();
}

// Calls fn(T{}) with T the activation type: float, bf16 or f16.
template <class Fn>
void dispatch_activation(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(bf16{});
      return;
    case DType::F16:
      fn(f16{});
      return;
    default:
      break;
  }
  ZT_THROW_UNSUPPORTED("CUDA activations take f32, bf16 or f16 tensors, got ", dtype_name(dtype));
}

template <class T>
T* mut(const Tensor& t) {
  return static_cast<T*>(t.data());
}
template <class T>
const T* in(const Tensor& t) {
  return static_cast<const T*>(t.data());
}

}  // namespace

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const bool aligned = aligned16(out.data()) && aligned16(inp.data());
  dispatch_activation(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(GeluForwardOp<T>{mut<T>(out), in<T>(inp)}, inp.numel(), aligned);
  });
}

void gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const bool aligned = aligned16(dinp.data()) && aligned16(dout.data()) && aligned16(inp.data());
  dispatch_activation(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(GeluBackwardOp<T>{mut<T>(dinp), in<T>(dout), in<T>(inp)}, inp.numel(), aligned);
  });
}

void silu_forward(const Tensor& out, const Tensor& inp) {
  const bool aligned = aligned16(out.data()) && aligned16(inp.data());
  dispatch_activation(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(SiluForwardOp<T>{mut<T>(out), in<T>(inp)}, inp.numel(), aligned);
  });
}

void silu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const bool aligned = aligned16(dinp.data()) && aligned16(dout.data()) && aligned16(inp.data());
  dispatch_activation(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(SiluBackwardOp<T>{mut<T>(dinp), in<T>(dout), in<T>(inp)}, inp.numel(), aligned);
  });
}

void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  const int64_t ld_out = row_stride(out, F), ld_gate = row_stride(gate, F), ld_up = row_stride(up, F);
  const size_t es = dtype_size(gate.dtype());
  const bool aligned = rows_aligned(out, ld_out, es) && rows_aligned(gate, ld_gate, es) && rows_aligned(up, ld_up, es);
  dispatch_activation(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_rows(SwigluForwardOp<T>{mut<T>(out), in<T>(gate), in<T>(up), ld_out, ld_gate, ld_up}, rows, F, aligned);
  });
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  const int64_t ld_dgate = row_stride(dgate, F), ld_dup = row_stride(dup, F), ld_dout = row_stride(dout, F),
                ld_gate = row_stride(gate, F), ld_up = row_stride(up, F);
  const size_t es = dtype_size(gate.dtype());
  const bool aligned = rows_aligned(dgate, ld_dgate, es) && rows_aligned(dup, ld_dup, es) &&
                       rows_aligned(dout, ld_dout, es) && rows_aligned(gate, ld_gate, es) &&
                       rows_aligned(up, ld_up, es);
  dispatch_activation(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_rows(SwigluBackwardOp<T>{mut<T>(dgate), mut<T>(dup), in<T>(dout), in<T>(gate), in<T>(up), ld_dgate, ld_dup,
                                    ld_dout, ld_gate, ld_up},
                rows, F, aligned);
  });
}

}  // namespace zt::cuda
