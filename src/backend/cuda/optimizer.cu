// Optimizer updates on the GPU; see backend/optimizer_kernels.h.
//
// Each update is one kernel over the flat range. The element-wise arithmetic is that of
// backend/cpu/optimizer_loops.h (itself PyTorch's single-tensor updates) operation by
// operation, each with its rounding spelled out (__fmaf_rn where the CPU loops fuse,
// __fmul_rn / __fadd_rn / __fdiv_rn / __fsqrt_rn elsewhere, which nvcc never contracts),
// and the scalar factors (bias corrections, decay factors) are computed on the host in
// double with the same expressions: every result is bitwise the CPU's. ZeRO-Offload
// (zero/offload_optimizer.h) relies on it: a unit stepped on the host and one stepped here
// end with the same bits. 16-bit parameters are updated through their f32 master and then
// rounded (nearest even) into the parameter.
//
// bf16 state without a master (MasterWeights::None, "pure bf16"): the same ops with state
// type S = bf16 and no master (the parameter is the weight); the state is loaded to f32
// and stored rounded to nearest even, as the CPU kernels with S = bf16. S = float (the
// default) is the f32-state path, unchanged.
//
// Segments: a range is updated as a list of segments (a unit's parameters), each with its
// own weight decay; the factors that depend on it (1 - lr*wd, or wd itself) are computed on
// the host per segment, as a per-segment call would, and travel in a table passed by value
// as a kernel parameter (up to 64 segments per launch: no upload, no host wait). A
// single-range update is the one-segment case.
//
// Shape of the work: a thread handles chunks of 8 consecutive elements in a grid-stride
// loop of 256-thread blocks. The chunks are the 8-element blocks of the range (counted from
// its start) that a segment covers, segment after segment; a thread finds its chunk's
// segment by binary search over the table. When every pointer is 16-byte aligned (the flat
// buffers always are) a chunk inside one segment moves in 16-byte vectors: one for 16-bit
// params/grads, two for the f32 master, gradient and states. Chunks cut by a segment's edge,
// misaligned views and the last partial chunk go element by element (two segments may share
// a chunk: each thread stores only its own segment's elements).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/chunked.cuh"
#include "backend/optimizer_kernels.h"
#include "core/dtype_dispatch.h"

namespace zt::cuda {
namespace {

// ---- the updates --------------------------------------------------------------------------

// The f32 value being optimised: the master copy when there is one, else the parameter.
template <class P>
__device__ __forceinline__ void load_weights(const P* param, const float* master, int64_t i, int count, bool vec,
                                             float (&w)[kChunk]) {
  if (master)
    load_chunk(master, i, count, vec, w);
  else
    load_chunk(param, i, count, vec, w);
}
template <class P>
__device__ __forceinline__ void store_weights(P* param, float* master, int64_t i, int count, bool vec,
                                              const float (&w)[kChunk]) {
  if (master) store_chunk(master, i, count, vec, w);
  store_chunk(param, i, count, vec, w);
}

template <class P, class G, class S = float>
struct AdamWOp {
  P* param;
  float* master;
  const G* grad;
  S* m;
  S* v;
  float b1, b2, eps, grad_scale;
  float step_size;  // lr / bias_correction1
  float bc2_sqrt;   // sqrt(bias_correction2)
  // Per segment: decay = 1 - lr*wd (decoupled) or 1; l2 = wd (L2) or 0.
  __device__ void operator()(int64_t i, int count, bool vec, float decay, float l2) const {
    float p[kChunk], g[kChunk], mi[kChunk], vi[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, g);
    load_chunk(m, i, count, vec, mi);
    load_chunk(v, i, count, vec, vi);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      float gk = __fmul_rn(g[k], grad_scale);
      if (l2 != 0.0f) gk = __fmaf_rn(l2, p[k], gk);
      p[k] = __fmul_rn(p[k], decay);
      mi[k] = __fmaf_rn(b1, mi[k], __fmul_rn(1.0f - b1, gk));
      vi[k] = __fmaf_rn(b2, vi[k], __fmul_rn(__fmul_rn(1.0f - b2, gk), gk));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi[k]), bc2_sqrt), eps);
      p[k] = __fmaf_rn(-step_size, __fdiv_rn(mi[k], denom), p[k]);
    }
    store_chunk(m, i, count, vec, mi);
    store_chunk(v, i, count, vec, vi);
    store_weights(param, master, i, count, vec, p);
  }
};

template <class P, class G, class S = float>
struct SgdOp {
  P* param;
  float* master;
  const G* grad;
  S* buf;                                // nullptr without momentum
  float lr, momentum, keep, grad_scale;  // keep = 1 - dampening
  bool nesterov, fresh;                  // fresh: the buffer holds nothing yet
  // Per segment: wd (L2, added to the gradient).
  __device__ void operator()(int64_t i, int count, bool vec, float wd, float /*unused*/) const {
    float p[kChunk], d[kChunk], b[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, d);
    if (buf && !fresh) load_chunk(buf, i, count, vec, b);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      d[k] = __fmul_rn(d[k], grad_scale);
      if (wd != 0.0f) d[k] = __fmaf_rn(wd, p[k], d[k]);
      if (buf) {
        b[k] = fresh ? d[k] : __fmaf_rn(momentum, b[k], __fmul_rn(keep, d[k]));
        d[k] = nesterov ? __fmaf_rn(momentum, b[k], d[k]) : b[k];
      }
      p[k] = __fmaf_rn(-lr, d[k], p[k]);
    }
    if (buf) store_chunk(buf, i, count, vec, b);
    store_weights(param, master, i, count, vec, p);
  }
};

// sign(0) = 0, as the CPU kernel.
template <class P, class G, class S = float>
struct LionOp {
  P* param;
  float* master;
  const G* grad;
  S* m;
  float lr, b1, b2, grad_scale;
  // Per segment: decay = 1 - lr*wd.
  __device__ void operator()(int64_t i, int count, bool vec, float decay, float /*unused*/) const {
    float p[kChunk], g[kChunk], mi[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, g);
    load_chunk(m, i, count, vec, mi);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float gk = __fmul_rn(g[k], grad_scale);
      p[k] = __fmul_rn(p[k], decay);
      const float c = __fmaf_rn(b1, mi[k], __fmul_rn(1.0f - b1, gk));
      const float s = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
      p[k] = __fmaf_rn(-lr, s, p[k]);
      mi[k] = __fmaf_rn(b2, mi[k], __fmul_rn(1.0f - b2, gk));
    }
    store_chunk(m, i, count, vec, mi);
    store_weights(param, master, i, count, vec, p);
  }
};

// ---- segments -------------------------------------------------------------------------------

constexpr int kMaxSegments = 64;

// One launch's segments, by value in the kernel's parameters (about 2 KiB).
struct SegmentTable {
  int64_t chunk_start[kMaxSegments + 1];  // first chunk (of the launch's chunks) of each segment; [count]: total
  int64_t begin[kMaxSegments];            // the segment is elements [begin, end) of the range
  int64_t end[kMaxSegments];
  float f0[kMaxSegments], f1[kMaxSegments];  // the op's per-segment factors
  int count;
};

// A segment with its factors, before it goes into a table.
struct HostSegment {
  int64_t begin, end;
  float f0, f1;
};

// The 8-element blocks of the range that [begin, end) touches (end > begin).
__host__ __device__ __forceinline__ int64_t first_chunk(int64_t begin) { return begin / kChunk; }
inline int64_t segment_chunks(int64_t begin, int64_t end) { return (end - 1) / kChunk - first_chunk(begin) + 1; }

// op(i, count, vec, f0, f1) for every chunk of every segment of the table, grid-stride.
template <class Op>
__global__ void segmented_kernel(const Op op, const __grid_constant__ SegmentTable t, bool aligned) {
  const int64_t chunks = t.chunk_start[t.count];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    // The last segment whose first chunk is at or before c.
    int lo = 0, hi = t.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (t.chunk_start[mid] <= c)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t block = (first_chunk(t.begin[lo]) + (c - t.chunk_start[lo])) * kChunk;
    const int64_t i = block > t.begin[lo] ? block : t.begin[lo];
    const int64_t e = block + kChunk < t.end[lo] ? block + kChunk : t.end[lo];
    const int count = static_cast<int>(e - i);
    op(i, count, aligned && count == kChunk, t.f0[lo], t.f1[lo]);
  }
}

// One launch per kMaxSegments non-empty segments (a unit has far fewer), on the compute stream.
template <class Op>
void launch_segmented(const Op& op, const std::vector<HostSegment>& segments, bool aligned) {
  std::vector<HostSegment> todo;
  todo.reserve(segments.size());
  for (const HostSegment& s : segments)
    if (s.end > s.begin) todo.push_back(s);
  for (size_t first = 0; first < todo.size(); first += kMaxSegments) {
    SegmentTable t{};
    t.count = static_cast<int>(std::min<size_t>(kMaxSegments, todo.size() - first));
    int64_t chunks = 0;
    for (int k = 0; k < t.count; ++k) {
      const HostSegment& s = todo[first + static_cast<size_t>(k)];
      t.chunk_start[k] = chunks;
      t.begin[k] = s.begin;
      t.end[k] = s.end;
      t.f0[k] = s.f0;
      t.f1[k] = s.f1;
      chunks += segment_chunks(s.begin, s.end);
    }
    t.chunk_start[t.count] = chunks;
    segmented_kernel<<<grid_for(chunks), kThreads, 0, compute_stream()>>>(op, t, aligned);
    ZT_CUDA_CHECK_LAST();
  }
}

float* f32_or_null(const Tensor& t) { return static_cast<float*>(t.data()); }  // undefined: nullptr

bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;  // nullptr counts as aligned
  return true;
}

// Calls fn(P*, const G*) with the parameter and gradient pointers cast to their dtypes.
template <class Fn>
void dispatch_param_grad(const Tensor& param, const Tensor& grad, Fn&& fn) {
  dispatch_float(param.dtype(), [&](auto ptag) {
    dispatch_float(grad.dtype(), [&](auto gtag) {
      using P = decltype(ptag);
      using G = decltype(gtag);
      fn(static_cast<P*>(param.data()), static_cast<const G*>(grad.data()));
    });
  });
}

// bf16 parameter with no master: its state is bf16 (validated by ops/).
bool bf16_state(const Tensor& param, const Tensor& master) {
  return master.data() == nullptr && param.dtype() == DType::BF16;
}
bf16* bf16_or_null(const Tensor& t) { return static_cast<bf16*>(t.data()); }  // undefined: nullptr

// Calls fn(const G*) with the gradient pointer cast to its dtype.
template <class Fn>
void dispatch_grad(const Tensor& grad, Fn&& fn) {
  dispatch_float(grad.dtype(), [&](auto gtag) {
    using G = decltype(gtag);
    fn(static_cast<const G*>(grad.data()));
  });
}

// The per-segment factors, each computed as backend/cpu/optimizer.cpp computes it for a
// range with that weight decay.
std::vector<HostSegment> adamw_segments(const AdamWHyper& h, const OptimizerSegments& segments) {
  const bool decoupled = h.decay == AdamDecay::Decoupled;
  std::vector<HostSegment> out;
  out.reserve(segments.size());
  for (const OptimizerSegment& s : segments) {
    const float decay = decoupled ? static_cast<float>(1.0 - static_cast<double>(h.lr) * s.weight_decay) : 1.0f;
    const float l2 = decoupled ? 0.0f : s.weight_decay;
    out.push_back({s.offset, s.offset + s.length, decay, l2});
  }
  return out;
}
std::vector<HostSegment> sgd_segments(const OptimizerSegments& segments) {
  std::vector<HostSegment> out;
  out.reserve(segments.size());
  for (const OptimizerSegment& s : segments) out.push_back({s.offset, s.offset + s.length, s.weight_decay, 0.0f});
  return out;
}
std::vector<HostSegment> lion_segments(const LionHyper& h, const OptimizerSegments& segments) {
  std::vector<HostSegment> out;
  out.reserve(segments.size());
  for (const OptimizerSegment& s : segments) {
    const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * s.weight_decay);
    out.push_back({s.offset, s.offset + s.length, decay, 0.0f});
  }
  return out;
}

// The whole range as one segment with h's weight decay.
OptimizerSegments whole(const Tensor& param, float weight_decay) { return {{0, param.numel(), weight_decay}}; }

}  // namespace

void adamw_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const OptimizerSegments& segments) {
  // Host scalars exactly as backend/cpu/optimizer.cpp computes them.
  const bool bc = h.bias_correction == BiasCorrection::On;
  const double bc1 = bc ? 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step)) : 1.0;
  const double bc2 = bc ? 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step)) : 1.0;
  const float step_size = static_cast<float>(h.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const std::vector<HostSegment> segs = adamw_segments(h, segments);
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), m.data(), v.data()});
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      launch_segmented(AdamWOp<bf16, G, bf16>{bf16_or_null(param), nullptr, g, bf16_or_null(m), bf16_or_null(v),
                                              h.beta1, h.beta2, h.eps, h.grad_scale, step_size, bc2_sqrt},
                       segs, aligned);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_segmented(AdamWOp<P, G>{p, f32_or_null(master), g, f32_or_null(m), f32_or_null(v), h.beta1, h.beta2, h.eps,
                                   h.grad_scale, step_size, bc2_sqrt},
                     segs, aligned);
  });
}

void sgd_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, const OptimizerSegments& segments) {
  const std::vector<HostSegment> segs = sgd_segments(segments);
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), momentum_buf.data()});
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      launch_segmented(SgdOp<bf16, G, bf16>{bf16_or_null(param), nullptr, g, bf16_or_null(momentum_buf), h.lr,
                                            h.momentum, 1.0f - h.dampening, h.grad_scale, h.nesterov == Nesterov::On,
                                            h.buffer == MomentumBuffer::Empty},
                       segs, aligned);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_segmented(
        SgdOp<P, G>{p, f32_or_null(master), g, f32_or_null(momentum_buf), h.lr, h.momentum, 1.0f - h.dampening,
                    h.grad_scale, h.nesterov == Nesterov::On, h.buffer == MomentumBuffer::Empty},
        segs, aligned);
  });
}

void lion_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const OptimizerSegments& segments) {
  const std::vector<HostSegment> segs = lion_segments(h, segments);
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), m.data()});
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      launch_segmented(
          LionOp<bf16, G, bf16>{bf16_or_null(param), nullptr, g, bf16_or_null(m), h.lr, h.beta1, h.beta2, h.grad_scale},
          segs, aligned);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_segmented(LionOp<P, G>{p, f32_or_null(master), g, f32_or_null(m), h.lr, h.beta1, h.beta2, h.grad_scale},
                     segs, aligned);
  });
}

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h) {
  adamw_step_segments(param, master, grad, m, v, h, whole(param, h.weight_decay));
}

void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h) {
  sgd_step_segments(param, master, grad, momentum_buf, h, whole(param, h.weight_decay));
}

void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h) {
  lion_step_segments(param, master, grad, m, h, whole(param, h.weight_decay));
}

}  // namespace zt::cuda
