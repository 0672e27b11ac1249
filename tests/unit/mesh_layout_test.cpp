// comm/mesh.h without ranks: the layout rules (validate), the coordinates of a rank, and a
// one-process mesh (every group this rank alone, nothing split).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/single.h"
#include "common/input_error.h"

namespace {

using zt::comm::ExpertTensor;
using zt::comm::Mesh;
using zt::comm::MeshAxis;
using zt::comm::ParallelDims;
using zt::testing::input_error_of;

ParallelDims dims(int dp_replicate, int dp_shard, int pp, int tp, int ep = 1, ExpertTensor et = ExpertTensor::Split) {
  ParallelDims d;
  d.dp_replicate = dp_replicate;
  d.dp_shard = dp_shard;
  d.pp = pp;
  d.tp = tp;
  d.ep = ep;
  d.expert_tensor = et;
  return d;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MeshLayout, ValidLayoutsPass) {
  EXPECT_NO_THROW(validate(ParallelDims::data_parallel(8), 8));
  EXPECT_NO_THROW(validate(dims(2, 2, 1, 2), 8));
  EXPECT_NO_THROW(validate(dims(1, 4, 1, 2, 4), 8));                       // ep borrows dp_shard
  EXPECT_NO_THROW(validate(dims(2, 2, 1, 2, 2), 8));                       // ... not dp_replicate
  EXPECT_NO_THROW(validate(dims(1, 2, 1, 2, 4, ExpertTensor::Whole), 4));  // ep borrows tp, then dp_shard
  EXPECT_NO_THROW(validate(dims(1, 1, 1, 4, 1, ExpertTensor::Whole), 4));  // ep 1 always fits
}

TEST(MeshLayout, ProductOtherThanTheWorldNamesTheSizes) {
  const std::string e = input_error_of([] { validate(dims(1, 3, 1, 2), 4); });
  EXPECT_TRUE(contains(e, "dp_replicate 1 x dp_shard 3 x pp 1 x tp 2")) << e;
  EXPECT_TRUE(contains(e, "= 6 but the job has 4 rank(s)")) << e;
}

TEST(MeshLayout, SizesBelowOneAreRefused) {
  for (const ParallelDims& d : {dims(0, 4, 1, 1), dims(1, 0, 1, 1), dims(1, 4, 0, 1), dims(1, 4, 1, 0),
                                dims(1, 4, 1, 1, 0), dims(1, 4, 1, 1, -2)}) {
    const std::string e = input_error_of([&] { validate(d, 4); });
    EXPECT_TRUE(contains(e, "must be at least 1")) << e;
  }
}

TEST(MeshLayout, ExpertParallelMustDivideTheRanksItBorrows) {
  // Split: ep takes data-parallel (shard) ranks only.
  std::string e = input_error_of([] { validate(dims(1, 2, 1, 2, 4), 4); });
  EXPECT_TRUE(contains(e, "ep 4 must divide dp_shard 2")) << e;
  e = input_error_of([] { validate(dims(2, 1, 1, 1, 2), 2); });  // replicated ranks cannot hold experts
  EXPECT_TRUE(contains(e, "ep 2 must divide dp_shard 1")) << e;
  e = input_error_of([] { validate(dims(1, 6, 1, 1, 4), 6); });
  EXPECT_TRUE(contains(e, "ep 4 must divide dp_shard 6")) << e;
  // Whole: every tp rank first, then data-parallel ones.
  e = input_error_of([] { validate(dims(1, 2, 1, 2, 3, ExpertTensor::Whole), 4); });
  EXPECT_TRUE(contains(e, "ep 3 must be a multiple of tp 2 and divide dp_shard x tp 4")) << e;
  e = input_error_of([] { validate(dims(1, 2, 1, 2, 8, ExpertTensor::Whole), 4); });
  EXPECT_TRUE(contains(e, "ep 8 must be a multiple of tp 2 and divide dp_shard x tp 4")) << e;
}

TEST(MeshLayout, RanksRunTensorFastestThenDataThenPipeline) {
  // dp_replicate 2 x dp_shard 2 x pp 2 x tp 2 = 16 ranks; rank 13 = 1 + 2 * (2 + 4 * 1).
  const ParallelDims d = dims(2, 2, 2, 2, 2);
  const zt::comm::MeshCoords c = mesh_coords(d, 13);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.dp_shard, 0);
  EXPECT_EQ(c.dp_replicate, 1);
  EXPECT_EQ(c.pp, 1);
  // Experts split over tp: ep fastest within dp, the rest of dp is expert-data-parallel.
  EXPECT_EQ(c.etp, 1);
  EXPECT_EQ(c.ep, 0);
  EXPECT_EQ(c.edp, 1);
  EXPECT_EQ(group_members(d, MeshAxis::Tp, 13), (std::vector<int>{12, 13}));
  EXPECT_EQ(group_members(d, MeshAxis::Dp, 13), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(group_members(d, MeshAxis::DpShard, 13), (std::vector<int>{13, 15}));
  EXPECT_EQ(group_members(d, MeshAxis::DpReplicate, 13), (std::vector<int>{9, 13}));
  EXPECT_EQ(group_members(d, MeshAxis::Pp, 13), (std::vector<int>{5, 13}));
  EXPECT_EQ(group_members(d, MeshAxis::Ep, 13), (std::vector<int>{13, 15}));
  EXPECT_EQ(group_members(d, MeshAxis::ExpertDp, 13), (std::vector<int>{9, 13}));
  EXPECT_EQ(group_members(d, MeshAxis::TpDp, 13).size(), 8u);
  EXPECT_EQ(group_members(d, MeshAxis::World, 13).size(), 16u);
}

TEST(MeshLayout, OneProcessMeshSplitsNothing) {
  zt::comm::SingleCommunicator world;
  const Mesh mesh(ParallelDims::data_parallel(1), world);
  EXPECT_EQ(mesh.splits(), 0);
  for (int a = 0; a < zt::comm::kMeshAxisCount; ++a) {
    const zt::comm::Group& g = mesh.group(static_cast<MeshAxis>(a));
    EXPECT_EQ(g.size(), 1);
    EXPECT_EQ(&g.host(), &world);  // the world itself, reused
    EXPECT_EQ(g.device(), nullptr);
  }
  const std::string e = input_error_of([&] {
    const Mesh wrong(dims(1, 1, 1, 2), world);
    (void)wrong;
  });
  EXPECT_TRUE(contains(e, "but the job has 1 rank(s)")) << e;
}

}  // namespace
