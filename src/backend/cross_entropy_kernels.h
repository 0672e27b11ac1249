// LM head fused with softmax cross-entropy, both backends: backend/cpu/cross_entropy.cpp
// and backend/cuda/cross_entropy.cu; the split (vocabulary-parallel) phases at the end of
// the list: backend/cpu/cross_entropy_split.cpp and backend/cuda/cross_entropy_split.cu. Same meaning, shapes and accumulation rule as
// ops/cross_entropy.h, whose wrappers have validated the tensors:
// dinp (=), dweight (+=, rows < vocab_size only: padding rows untouched), losses (=, 0 on
// ignored rows).
//
// Dtypes: inp and dinp f32 (CUDA: or bf16/f16, each independently); weight and dweight
// f32, bf16 or f16 (one dtype); targets i32; losses f32. All on one device.
//
// CUDA: the rows are processed in chunks (logits of a chunk in f32 scratch, about 1 GiB at most,
// the dlogits written in place over them), so [N, V] logits never exist whole. The only
// host synchronisation is the copy of the loss sum and count at the end. A target outside
// [0, vocab_size) that is not ignore_index throws BadInput (as on the CPU) but is only found
// at the end: by then dinp, dweight and losses have been written (the row counted as
// ignored).
//
// chunk_rows > 0 sets the rows per chunk (tests); 0 picks it from the memory budget. The
// CPU's chunking is its own (chunk_rows is ignored there).
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt {
struct CrossEntropySums {
  double loss_sum = 0.0;  // sum over counted rows of -log softmax(logits)[target]
  int64_t count = 0;      // rows whose target != ignore_index
};
}  // namespace zt

// The CUDA kernel's chunking, here so that memory estimates (`zerotrain estimate`) use the
// same rule: the chunk's logits [rows, ld] (ld = V rounded up to 64) within a 1 GiB budget
// in the logits' dtype, the rows spread evenly over the fewest chunks and rounded up to 64;
// several chunks with a 16-bit dweight need an f32 [ld, C] accumulator, so one chunk is
// used whenever it takes no more memory than that.
struct LmHeadChunkPlan {
  int64_t ld = 0, rows = 0, chunks = 0;
  bool f32_accumulator = false;  // dweight accumulated in f32 [ld, C] over the chunks
  // Device scratch of one call: the chunk's logits, the accumulator, and the weight copy
  // padded to ld rows (only when V % 64 != 0) in the compute dtype.
  int64_t workspace_bytes(int64_t C, int64_t logits_elem_bytes, int64_t compute_elem_bytes, int64_t V) const {
    return rows * ld * logits_elem_bytes + (f32_accumulator ? ld * C * 4 : 0) +
           (ld != V ? ld * C * compute_elem_bytes : 0);
  }
};

// N rows, vocabulary V, hidden C; chunk_rows > 0 forces the rows per chunk (tests);
// dweight_16bit_backward: a backward into a bf16/f16 dweight.
inline LmHeadChunkPlan lm_head_chunk_plan(int64_t N, int64_t V, int64_t C, int64_t logits_elem_bytes,
                                          bool dweight_16bit_backward, int64_t chunk_rows) {
  constexpr int64_t kLdAlign = 64;
  constexpr int64_t kChunkBudgetBytes = int64_t{1} << 30;
  LmHeadChunkPlan p;
  p.ld = (V + kLdAlign - 1) / kLdAlign * kLdAlign;
  if (N == 0) return p;
  const int64_t zs = logits_elem_bytes;
  if (chunk_rows > 0) {
    p.rows = chunk_rows < N ? chunk_rows : N;
  } else {
    int64_t r_max = kChunkBudgetBytes / (p.ld * zs);
    if (r_max < 1) r_max = 1;
    if (r_max >= 64) r_max = r_max / 64 * 64;
    const int64_t n_chunks = (N + r_max - 1) / r_max;
    int64_t R = (N + n_chunks - 1) / n_chunks;
    if (r_max >= 64) R = (R + 63) / 64 * 64;  // still <= r_max (a multiple of 64)
    R = R < N ? R : N;
    const int64_t chunked_bytes = R * p.ld * zs + (dweight_16bit_backward ? p.ld * C * 4 : 0);
    if (R < N && N * p.ld * zs <= chunked_bytes) R = N;
    p.rows = R;
  }
  p.chunks = (N + p.rows - 1) / p.rows;
  p.f32_accumulator = dweight_16bit_backward && p.chunks > 1;
  return p;
}

// lm_head_cross_entropy_forward: inp [N, C], weight [Vp, C], targets [N]; losses optional
// [N]. ..._forward_backward: L = grad_scale * loss_sum, dinp [N, C] (=), dweight [Vp, C] (+=).
// chunk_rows: rows per logits chunk, 0 = the kernels' own choice.
//
// The split (vocabulary-parallel) phases, ops/cross_entropy.h; the logits of a chunk of m
// rows are f32 [m, Vl] (contiguous), computed by ops::gemm:
//   cross_entropy_slice_stats: stats f32 [3, N] columns row0 .. row0 + m (=): the row's
//     max, sum of exp(z - max) and target logit (target in [vocab_begin, vocab_begin + Vl));
//     an ignored row or an empty slice: -inf, 0, 0.
//   cross_entropy_rescale: stats' sums rescaled to global_max f32 [N] (the group's max),
//     row 0 set to it.
//   cross_entropy_finish: lse = max + log(sum), losses = lse - target logit (0 when ignored).
//   cross_entropy_dlogits: logits (in place) = grad_scale (exp(z - lse) - onehot), 0 on
//     ignored rows; lse and targets are the chunk's rows.
#define ZT_CROSS_ENTROPY_KERNELS(K)                                                                             \
  K(CrossEntropySums, lm_head_cross_entropy_forward,                                                            \
    (const Tensor& inp, const Tensor& weight, const Tensor& targets, int64_t vocab_size, int ignore_index,      \
     const Tensor& losses, int64_t chunk_rows))                                                                 \
  K(CrossEntropySums, lm_head_cross_entropy_forward_backward,                                                   \
    (const Tensor& dinp, const Tensor& dweight, const Tensor& inp, const Tensor& weight, const Tensor& targets, \
     int64_t vocab_size, int ignore_index, float grad_scale, int64_t chunk_rows))                               \
  K(void, cross_entropy_slice_stats,                                                                            \
    (const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t row0, int64_t vocab_begin,       \
     int ignore_index))                                                                                         \
  K(void, cross_entropy_rescale, (const Tensor& stats, const Tensor& global_max))                               \
  K(void, cross_entropy_finish,                                                                                 \
    (const Tensor& losses, const Tensor& lse, const Tensor& stats, const Tensor& targets, int ignore_index))    \
  K(void, cross_entropy_dlogits,                                                                                \
    (const Tensor& logits, const Tensor& lse, const Tensor& targets, int64_t vocab_begin, int ignore_index,     \
     float grad_scale))

namespace zt::cpu {
ZT_CROSS_ENTROPY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_CROSS_ENTROPY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
