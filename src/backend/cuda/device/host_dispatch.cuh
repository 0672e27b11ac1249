// Host-side launch helpers shared by the .cu files of the row/column and attention kernels
// (norm, embedding, RoPE, attention): the dtype dispatch onto device element types, the
// 16-byte alignment test that picks vector access, and the grid of a grid-stride loop.
//
// Include from .cu files; like element_vec.cuh, it lives in an unnamed namespace.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/device/element_vec.cuh"
#include "core/dtype.h"
#include "core/dtype_dispatch.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

// Calls fn(Tag<A>) with A the device type of an activation dtype (f32, bf16 or f16); `who`
// names the op in the error any other dtype gets.
template <class Fn>
void dispatch_activation(const char* who, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::F32:
      return fn(Tag<float>{});
    case DType::BF16:
      return fn(Tag<__nv_bfloat16>{});
    case DType::F16:
      return fn(Tag<__half>{});
    default:
      break;
  }
  ZT_THROW_UNSUPPORTED(who, ": activations must be f32, bf16 or f16, got ", dtype_name(dt));
}

// Calls fn(Tag<W>) with W the device type of a parameter dtype (f32, bf16 or f16).
template <class Fn>
void dispatch_param(DType dt, Fn&& fn) {
  dispatch_float(dt, [&](auto tag) { fn(Tag<typename DeviceType<decltype(tag)>::type>{}); });
}

// Whether a pointer allows 16-byte vector loads and stores (null counts as aligned: an
// absent optional operand does not block the vector path).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over `work` items: enough to fill any current GPU, never
// more than the work needs.
inline unsigned grid_stride_blocks(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(blocks, 65536));
}

}  // namespace
}  // namespace zt::cuda
