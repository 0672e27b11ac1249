// The vocabulary-parallel cross-entropy (parallel/vocab_parallel_cross_entropy.h) under
// mpirun at 1, 2 and 4 ranks: each rank holds its rows of the head (150 tokens padded to 256
// rows: at 4 ranks the last holds padding only) and the group's all-reduces combine the
// partials. Every rank's per-row losses and dinp, and its rows of dweight, equal the fused
// one-rank op's (f32 tolerance).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "comm/mpi_communicator.h"
#include "common/split_cross_entropy.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace zt {
namespace {

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> c = comm::MpiCommunicator::world();
  return *c;
}

TEST(VocabParallelCrossEntropy, MatchesTheFusedOneRankOp) {
  const int ranks = world().size(), rank = world().rank();
  const testing::CeProblem p = testing::ce_problem(33, 16, 150, 256);
  int64_t count = 0;
  for (int64_t i = 0; i < p.N; ++i) count += p.targets.data<int32_t>()[i] != testing::kCeIgnore;
  const float scale = 1.0f / static_cast<float>(count);
  const testing::CeResult want = testing::fused_cross_entropy(p, scale);

  const int64_t rows = p.Vp / ranks;
  const parallel::VocabSlice slice = parallel::vocab_slice(p.V, p.Vp, rank, ranks);
  const Tensor weight = p.weight->narrow(0, rank * rows, rows);
  OwnedTensor losses({p.N}, DType::F32), lse({p.N}, DType::F32), dinp({p.N, p.C}, DType::F32);
  OwnedTensor dweight = OwnedTensor::zeros({rows, p.C}, DType::F32);
  const comm::Group group(world());
  parallel::vocab_parallel_cross_entropy_forward(group, losses, lse, p.inp, weight, p.targets, slice,
                                                 testing::kCeIgnore);
  parallel::vocab_parallel_cross_entropy_backward(group, dinp, dweight, p.inp, weight, p.targets, slice,
                                                  testing::kCeIgnore, lse, scale);
  const std::vector<float> want_dw(want.dweight.begin() + rank * rows * p.C,
                                   want.dweight.begin() + (rank + 1) * rows * p.C);
  EXPECT_LE(testing::max_rel(losses->to_f32_vector(), want.losses), 1e-5) << "losses, rank " << rank;
  EXPECT_LE(testing::max_rel(dinp->to_f32_vector(), want.dinp), 1e-5) << "dinp, rank " << rank;
  EXPECT_LE(testing::max_rel(dweight->to_f32_vector(), want_dw), 1e-5) << "dweight rows, rank " << rank;
}

}  // namespace
}  // namespace zt
