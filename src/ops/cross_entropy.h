// The LM head fused with softmax cross-entropy: logits = inp @ weight^T are computed a
// chunk of rows at a time and never stored whole (V is large).
// weight may have more rows than vocab_size (vocab padded to a multiple of 128): the
// padding rows are not part of the softmax and get no gradient.
// Rows whose target equals ignore_index (HF: -100) add no loss and no gradient.
// inp/dinp are f32 (on CUDA f32 or bf16). On CUDA (backend/cross_entropy_kernels.h) the
// loss sum and count are the op's only host synchronisation, and an out-of-range target is
// reported (BadInput) after the outputs have been written.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::ops {

struct CrossEntropyResult {
  double loss_sum = 0.0;  // sum over counted rows of -log softmax(logits)[target]
  int64_t count = 0;      // rows whose target != ignore_index
};

// inp [N, C], weight [Vp, C], targets i32 [N]. losses (optional, f32 [N]) gets each row's loss
// (0 for ignored rows).
CrossEntropyResult lm_head_cross_entropy_forward(const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                                 int64_t vocab_size, int ignore_index, const Tensor& losses);

// Forward and backward in one pass, for the loss L = grad_scale * loss_sum:
// dinp [N, C] = dL/dinp (=), dweight [Vp, C] += dL/dweight (skipped when dweight has no data:
// a frozen head, LoRA).
CrossEntropyResult lm_head_cross_entropy_forward_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp,
                                                          const Tensor& weight, const Tensor& targets,
                                                          int64_t vocab_size, int ignore_index, float grad_scale);

}  // namespace zt::ops
