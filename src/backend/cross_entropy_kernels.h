// LM head fused with softmax cross-entropy, both backends: backend/cpu/cross_entropy.cpp
// and backend/cuda/cross_entropy.cu. Same meaning, shapes and accumulation rule as
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

// lm_head_cross_entropy_forward: inp [N, C], weight [Vp, C], targets [N]; losses optional
// [N]. ..._forward_backward: L = grad_scale * loss_sum, dinp [N, C] (=), dweight [Vp, C] (+=).
// chunk_rows: rows per logits chunk, 0 = the kernels' own choice.
#define ZT_CROSS_ENTROPY_KERNELS(K)                                                                             \
  K(CrossEntropySums, lm_head_cross_entropy_forward,                                                            \
    (const Tensor& inp, const Tensor& weight, const Tensor& targets, int64_t vocab_size, int ignore_index,      \
     const Tensor& losses, int64_t chunk_rows))                                                                 \
  K(CrossEntropySums, lm_head_cross_entropy_forward_backward,                                                   \
    (const Tensor& dinp, const Tensor& dweight, const Tensor& inp, const Tensor& weight, const Tensor& targets, \
     int64_t vocab_size, int ignore_index, float grad_scale, int64_t chunk_rows))

namespace zt::cpu {
ZT_CROSS_ENTROPY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_CROSS_ENTROPY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
