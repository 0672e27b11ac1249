// comm/mesh.h under mpirun (CTest comm.np1/np2/np4, and comm.np8 for these tests alone):
// for every layout of the job's ranks — dp_replicate x dp_shard x pp x tp = world size,
// with every ep that fits (experts split over tp, or whole per rank) — each group's
// members and this rank's index in it follow the reference formula below, and an
// all_reduce over the group's host and device communicators sums exactly its members'
// ranks. A second MPI world stands in for the device world (the NCCL one splits alike).
// Each distinct communicator is summed over once (axes with equal members share one).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/mesh.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace zt;
using comm::ExpertTensor;
using comm::MeshAxis;
using comm::ParallelDims;

comm::Communicator& host_world() {
  static std::unique_ptr<comm::MpiCommunicator> c = comm::MpiCommunicator::world();
  return *c;
}
comm::Communicator& device_world() {
  static std::unique_ptr<comm::MpiCommunicator> c = comm::MpiCommunicator::world();
  return *c;
}

// A rank's coordinates, written from the rank formula forwards (not mesh_coords' inverse).
struct Coord {
  int rep, shard, pp, tp;  // dense view
  int etp, ep, edp;        // expert view
};

// rank = tp_r + tp * (shard + dp_shard * rep + dp * pp); within a stage the expert view is
// etp_r + etp * (ep_r + ep * edp_r).
std::vector<Coord> reference_coords(const ParallelDims& d) {
  const int etp = d.expert_tensor == ExpertTensor::Split ? d.tp : 1;
  const int stage = d.tp * d.dp_replicate * d.dp_shard;
  const int edp = stage / (etp * d.ep);
  std::vector<Coord> by_rank(static_cast<size_t>(d.world_size()));
  for (int pp = 0; pp < d.pp; ++pp)
    for (int rep = 0; rep < d.dp_replicate; ++rep)
      for (int shard = 0; shard < d.dp_shard; ++shard)
        for (int tp = 0; tp < d.tp; ++tp) {
          const int rank = tp + d.tp * (shard + d.dp_shard * rep + d.dp_replicate * d.dp_shard * pp);
          by_rank[static_cast<size_t>(rank)].rep = rep;
          by_rank[static_cast<size_t>(rank)].shard = shard;
          by_rank[static_cast<size_t>(rank)].pp = pp;
          by_rank[static_cast<size_t>(rank)].tp = tp;
        }
  for (int pp = 0; pp < d.pp; ++pp)
    for (int e = 0; e < edp; ++e)
      for (int x = 0; x < d.ep; ++x)
        for (int t = 0; t < etp; ++t) {
          const int rank = t + etp * (x + d.ep * e) + stage * pp;
          by_rank[static_cast<size_t>(rank)].etp = t;
          by_rank[static_cast<size_t>(rank)].ep = x;
          by_rank[static_cast<size_t>(rank)].edp = e;
        }
  return by_rank;
}

// The reference group: every rank that shares `me`'s coordinates off the group's axes.
std::vector<int> reference_group(const std::vector<Coord>& c, MeshAxis axis, int me) {
  const Coord& a = c[static_cast<size_t>(me)];
  std::vector<int> members;
  for (int q = 0; q < static_cast<int>(c.size()); ++q) {
    const Coord& b = c[static_cast<size_t>(q)];
    bool in = false;
    switch (axis) {
      case MeshAxis::DpReplicate:
        in = a.pp == b.pp && a.tp == b.tp && a.shard == b.shard;
        break;
      case MeshAxis::DpShard:
        in = a.pp == b.pp && a.tp == b.tp && a.rep == b.rep;
        break;
      case MeshAxis::Pp:
        in = a.tp == b.tp && a.shard == b.shard && a.rep == b.rep;
        break;
      case MeshAxis::Tp:
        in = a.pp == b.pp && a.shard == b.shard && a.rep == b.rep;
        break;
      case MeshAxis::Ep:
        in = a.pp == b.pp && a.etp == b.etp && a.edp == b.edp;
        break;
      case MeshAxis::Dp:
        in = a.pp == b.pp && a.tp == b.tp;
        break;
      case MeshAxis::ExpertDp:
        in = a.pp == b.pp && a.etp == b.etp && a.ep == b.ep;
        break;
      case MeshAxis::ExpertTp:
        in = a.pp == b.pp && a.ep == b.ep && a.edp == b.edp;
        break;
      case MeshAxis::TpDp:
        in = a.pp == b.pp;
        break;
      case MeshAxis::World:
        in = true;
        break;
    }
    if (in) members.push_back(q);
  }
  return members;
}

// Every layout of `world` ranks that validate() accepts (ep 1 once, not per ExpertTensor).
std::vector<ParallelDims> all_layouts(int world) {
  std::vector<ParallelDims> out;
  for (int rep = 1; rep <= world; ++rep)
    for (int shard = 1; shard <= world; ++shard)
      for (int pp = 1; pp <= world; ++pp)
        for (int tp = 1; tp <= world; ++tp) {
          if (rep * shard * pp * tp != world) continue;
          for (int ep = 1; ep <= world; ++ep)
            for (ExpertTensor et : {ExpertTensor::Split, ExpertTensor::Whole}) {
              if (ep == 1 && et == ExpertTensor::Whole) continue;
              ParallelDims d;
              d.dp_replicate = rep;
              d.dp_shard = shard;
              d.pp = pp;
              d.tp = tp;
              d.ep = ep;
              d.expert_tensor = et;
              try {
                validate(d, world);
              } catch (const Error&) {
                continue;
              }
              out.push_back(d);
            }
        }
  return out;
}

// The sum of (rank + 1) over the group, through `c` (f32: exact for these small sums).
float rank_sum(comm::Communicator& c, int rank) {
  OwnedTensor t({1}, DType::F32);
  t->set_f32(0, static_cast<float>(rank + 1));
  c.all_reduce(t, comm::ReduceOp::Sum);
  return t->get_f32(0);
}

TEST(Mesh, EveryLayoutHasTheReferenceGroups) {
  const int world = host_world().size(), rank = host_world().rank();
  const std::vector<ParallelDims> layouts = all_layouts(world);
  ASSERT_FALSE(layouts.empty());
  for (size_t l = 0; l < layouts.size(); ++l) {
    const ParallelDims& d = layouts[l];
    const std::string what = describe(d);
    // The device world is split with the host world's colours and keys (one code path):
    // every third layout checks it, which keeps the 8-rank run short.
    const bool with_device = l % 3 == 0;
    const comm::Mesh mesh(d, host_world(), with_device ? &device_world() : nullptr);
    const std::vector<Coord> ref = reference_coords(d);
    const Coord& me = ref[static_cast<size_t>(rank)];
    const comm::MeshCoords& c = mesh.coords();
    EXPECT_EQ(c.dp_replicate, me.rep) << what;
    EXPECT_EQ(c.dp_shard, me.shard) << what;
    EXPECT_EQ(c.dp, me.shard + d.dp_shard * me.rep) << what;
    EXPECT_EQ(c.pp, me.pp) << what;
    EXPECT_EQ(c.tp, me.tp) << what;
    EXPECT_EQ(c.etp, me.etp) << what;
    EXPECT_EQ(c.ep, me.ep) << what;
    EXPECT_EQ(c.edp, me.edp) << what;
    // A communicator shared by several axes (equal members) is summed over once; the
    // others must then have its members.
    std::vector<std::pair<const comm::Communicator*, std::vector<int>>> summed;
    const auto check_sum = [&](comm::Communicator& c, const std::vector<int>& members, const std::string& where) {
      for (const auto& [seen, seen_members] : summed)
        if (seen == &c) {
          EXPECT_EQ(members, seen_members) << where << " shares a communicator with other members";
          return;
        }
      summed.emplace_back(&c, members);
      float expected = 0;
      for (int m : members) expected += static_cast<float>(m + 1);
      EXPECT_EQ(rank_sum(c, rank), expected) << where << " (" << c.backend_name() << ")";
    };
    for (int a = 0; a < comm::kMeshAxisCount; ++a) {
      const MeshAxis axis = static_cast<MeshAxis>(a);
      const std::string where = what + ", group " + mesh_axis_name(axis);
      const std::vector<int> members = reference_group(ref, axis, rank);
      EXPECT_EQ(group_members(d, axis, rank), members) << where;
      const comm::Group& g = mesh.group(axis);
      ASSERT_EQ(g.size(), static_cast<int>(members.size())) << where;
      EXPECT_EQ(g.rank(), static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin())) << where;
      check_sum(g.host(), members, where);
      if (!with_device) {
        EXPECT_EQ(g.device(), nullptr) << where;
        continue;
      }
      ASSERT_NE(g.device(), nullptr) << where;
      EXPECT_NE(g.device(), &g.host()) << where;
      EXPECT_EQ(g.device()->size(), g.size()) << where;
      EXPECT_EQ(g.device()->rank(), g.rank()) << where;
      check_sum(*g.device(), members, where + " device");
    }
    // The composites the engine and later features use.
    EXPECT_EQ(&mesh.data_parallel(), &mesh.group(MeshAxis::Dp));
    EXPECT_EQ(&mesh.expert_data_parallel(), &mesh.group(MeshAxis::ExpertDp));
    EXPECT_EQ(mesh.world().size(), world);
    EXPECT_EQ(mesh.dims().ep * mesh.dims().edp() * mesh.dims().etp(), d.tp * d.dp()) << what;
  }
}

TEST(Mesh, DataParallelOnlyReusesTheWorldAndSplitsNothing) {
  const comm::Mesh mesh(ParallelDims::data_parallel(host_world().size()), host_world(), &device_world());
  EXPECT_EQ(mesh.splits(), 0);
  EXPECT_EQ(&mesh.data_parallel().host(), &host_world());
  EXPECT_EQ(mesh.data_parallel().device(), &device_world());
  EXPECT_EQ(&mesh.data_parallel().buffers(), &device_world());
  EXPECT_EQ(&mesh.world().host(), &host_world());
  // Size-1 axes: a single-process communicator each, no split.
  EXPECT_EQ(mesh.group(MeshAxis::Tp).size(), 1);
  EXPECT_EQ(mesh.group(MeshAxis::Pp).size(), 1);
  EXPECT_EQ(mesh.group(MeshAxis::Tp).host().backend_name(), host_world().size() == 1 ? "mpi" : "single");
}

TEST(Mesh, OwnsTheWorldsItIsGiven) {
  const int world = host_world().size();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  ParallelDims d;
  d.tp = 2;
  d.dp_shard = world / 2;
  const comm::Mesh mesh(d, comm::MpiCommunicator::world());
  EXPECT_EQ(mesh.world().device(), nullptr);
  EXPECT_EQ(&mesh.group(MeshAxis::Tp).buffers(), &mesh.group(MeshAxis::Tp).host());
  EXPECT_EQ(rank_sum(mesh.group(MeshAxis::Tp).host(), mesh.rank()),
            static_cast<float>(2 * (mesh.rank() - mesh.coords().tp) + 3));  // ranks 2k and 2k+1
  EXPECT_EQ(mesh.splits(), world == 2 ? 0 : 2);  // tp, and dp (= tp_dp = expert_dp); the rest reuse
}

}  // namespace
