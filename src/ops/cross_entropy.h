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

// The split form, for a vocabulary-parallel head (parallel/vocab_parallel_cross_entropy.h
// combines the ranks' partials): `weight` holds this rank's vocabulary rows, rows
// [0, vocab_local) being the tokens [vocab_begin, vocab_begin + vocab_local) (more rows:
// padding, never read). Everything stays on the device: no host sums, no synchronisation.
// The logits are computed a chunk of rows at a time (ops::gemm, f32 [rows, vocab_local]).
// Targets are not range-checked here (a target outside every rank's slice adds its lse): the
// fused form above checks them, and a tp = 1 run takes it.
//
// stats f32 [3, N] (=): per row this slice's max, sum of exp(logit - max) and the target's
// logit (0 when the target is another rank's); an ignored row or an empty slice: -inf, 0, 0.
void lm_head_cross_entropy_partial(const Tensor& stats, const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                   int64_t vocab_begin, int64_t vocab_local, int ignore_index);
// stats' sums rescaled to the group's max global_max f32 [N] (row 0 becomes it), so that
// the ranks' rows 1 and 2 can be summed.
void cross_entropy_rescale(const Tensor& stats, const Tensor& global_max);
// From the combined stats: lse (=, f32 [N]) = max + log(sum), losses (=, f32 [N]) = lse -
// target logit; 0 on ignored rows.
void cross_entropy_finish(const Tensor& losses, const Tensor& lse, const Tensor& stats, const Tensor& targets,
                          int ignore_index);
// The backward of L = grad_scale * sum of the losses from the forward's lse: dinp (=, this
// slice's share of dL/dinp) and dweight (+=, rows [0, vocab_local); skipped without data).
void lm_head_cross_entropy_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp, const Tensor& weight,
                                    const Tensor& targets, int64_t vocab_begin, int64_t vocab_local, int ignore_index,
                                    const Tensor& lse, float grad_scale);

}  // namespace zt::ops
