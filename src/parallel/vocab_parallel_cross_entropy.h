// The LM head's cross-entropy over a vocabulary split between the ranks of a group
// (Megatron's vocab_parallel_cross_entropy, core/tensor_parallel/cross_entropy.py): each
// rank holds its rows of the head (the padded vocabulary split evenly, model/weights.h's
// TpSplit::Vocab) and computes its slice's partial statistics (ops/cross_entropy.h:
// lm_head_cross_entropy_partial); the group's all-reduce of the max, then of the rescaled
// sums and target logits, gives every rank the whole softmax's log-sum-exp and the loss of
// every row (finish). The backward recomputes the slice's logits from that lse; the head's
// input is replicated, so dinp (each rank's share) is summed over the group.
//
// Everything stays on the device; the caller reads the loss sum when it wants it. A group of
// one rank (or none) computes the whole vocabulary the same way, without collectives. The
// fused ops::lm_head_cross_entropy_forward(_backward) stays the single-rank training path.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "parallel/linear.h"

namespace zt::parallel {

// This rank's tokens [begin, begin + size) of a vocabulary of vocab_size tokens padded to
// padded_rows rows split evenly over `ranks` (the last ranks may hold padding only).
struct VocabSlice {
  int64_t begin = 0, size = 0;
};
VocabSlice vocab_slice(int64_t vocab_size, int64_t padded_rows, int rank, int ranks);

// losses (=, f32 [N]; 0 on ignored rows) and lse (=, f32 [N]; kept for the backward) of the
// whole vocabulary's softmax. weight: this rank's rows [Vp / ranks, C]; targets i32 [N] (of
// the whole vocabulary).
void vocab_parallel_cross_entropy_forward(const Group& group, const Tensor& losses, const Tensor& lse,
                                          const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                          VocabSlice slice, int ignore_index);

// For L = grad_scale * sum of the losses: dinp (=, summed over the group) and dweight (+=,
// this rank's rows; skipped without data).
void vocab_parallel_cross_entropy_backward(const Group& group, const Tensor& dinp, const Tensor& dweight,
                                           const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                           VocabSlice slice, int ignore_index, const Tensor& lse, float grad_scale);

}  // namespace zt::parallel
