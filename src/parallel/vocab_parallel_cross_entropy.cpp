// Vocabulary-parallel cross-entropy (see vocab_parallel_cross_entropy.h): partial, the
// group's max and sums, finish.
#include "parallel/vocab_parallel_cross_entropy.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/cross_entropy.h"

namespace zt::parallel {

VocabSlice vocab_slice(int64_t vocab_size, int64_t padded_rows, int rank, int ranks) {
  ZT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && padded_rows % ranks == 0 && vocab_size <= padded_rows,
           "vocab_slice: ", padded_rows, " rows over ", ranks, " ranks (rank ", rank, "), vocabulary ", vocab_size);
  const int64_t rows = padded_rows / ranks, begin = rank * rows;
  return {begin, std::clamp<int64_t>(vocab_size - begin, 0, rows)};
}

void vocab_parallel_cross_entropy_forward(const Group& group, const Tensor& losses, const Tensor& lse,
                                          const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                          VocabSlice slice, int ignore_index) {
  const int64_t N = inp.size(0);
  const Device dev = inp.device();
  OwnedTensor stats({3, N}, DType::F32, dev);
  ops::lm_head_cross_entropy_partial(stats, inp, weight, targets, slice.begin, slice.size, ignore_index);
  comm::Communicator* c = group.for_tensors_on(dev);
  if (c != nullptr && c->size() > 1) {
    // Each rank's sum relative to the group's max, then the sums and target logits summed
    // (the target is in one rank's slice; the others add 0).
    OwnedTensor global_max({N}, DType::F32, dev);
    ops::copy(global_max, stats->narrow(0, 0, 1).reshape({N}));
    c->all_reduce(global_max, comm::ReduceOp::Max);
    ops::cross_entropy_rescale(stats, global_max);
    c->all_reduce(stats->narrow(0, 1, 2), comm::ReduceOp::Sum);
  }
  ops::cross_entropy_finish(losses, lse, stats, targets, ignore_index);
}

void vocab_parallel_cross_entropy_backward(const Group& group, const Tensor& dinp, const Tensor& dweight,
                                           const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                           VocabSlice slice, int ignore_index, const Tensor& lse, float grad_scale) {
  ops::lm_head_cross_entropy_backward(dinp, dweight, inp, weight, targets, slice.begin, slice.size, ignore_index, lse,
                                      grad_scale);
  comm::Communicator* c = group.for_tensors_on(inp.device());
  if (c != nullptr && c->size() > 1) c->all_reduce(dinp, comm::ReduceOp::Sum);
}

}  // namespace zt::parallel
