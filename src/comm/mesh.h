// The device mesh: the job's ranks as a grid of named parallel axes, and one communicator
// group per axis (and per composite of axes later features reduce over), split once from
// the world. Passed explicitly to what needs a group; there is no global mesh.
//
// Axes (torchtitan's ParallelDims, Megatron's HyperCommGrid / ProcessGroupCollection):
//   dp_replicate  data parallel, replicated model states (DDP, HSDP's outer dimension)
//   dp_shard      data parallel, sharded model states (ZeRO / FSDP)
//   pp            pipeline stages
//   tp            tensor parallel (column / row-parallel linears)
//   ep            expert parallel: carved out of the data-parallel ranks (and, with
//                 ExpertTensor::Whole, out of the tensor ranks too), never a factor of the
//                 world size of its own
// world size = dp_replicate x dp_shard x pp x tp.
//
// Rank order (Megatron's default "tp-dp-pp", with experts inside data parallel):
//   rank = tp_r + tp * (dp_r + dp * pp_r),   dp_r = shard_r + dp_shard * replicate_r
// tensor fastest (the ranks of a tensor group are neighbours: one host's NVLink), then data
// (shard faster than replicate: HSDP shards within a host, replicates across), then
// pipeline slowest. The expert view of the same ranks within a pipeline stage,
// s = rank mod (tp * dp):
//   s = etp_r + etp * (ep_r + ep * edp_r)
// with etp (expert tensor parallel) = tp for ExpertTensor::Split and 1 for Whole, and
// edp = tp * dp / (etp * ep) the expert-data-parallel size: the ranks that hold copies of
// the same experts and reduce their gradients (dense units reduce over dp).
//
// Groups: every rank of a group shares the coordinates the group does not span; members
// are ordered by world rank, so a rank's index in its group is its coordinate on the
// group's axes (in the order above). A group of size 1 costs nothing (a single-process
// communicator, no split); a group of every rank reuses the world communicator; a group
// with the members of one already split reuses it.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/group.h"

namespace zt::comm {

// Experts under tensor parallelism: Split (each expert's linears split over the tensor
// group as the dense ones are; ep borrows data-parallel ranks only) or Whole (every expert
// whole on its rank; ep borrows the tensor ranks and then data-parallel ones). torchtitan's
// etp = tp and etp = 1.
enum class ExpertTensor { Split, Whole };

struct ParallelDims {
  int dp_replicate = 1;
  int dp_shard = 1;
  int pp = 1;
  int tp = 1;
  int ep = 1;
  ExpertTensor expert_tensor = ExpertTensor::Split;

  int dp() const { return dp_replicate * dp_shard; }
  int world_size() const { return dp() * pp * tp; }
  int etp() const { return expert_tensor == ExpertTensor::Split ? tp : 1; }
  int edp() const { return dp() * tp / (etp() * ep); }
  // Every rank a data-parallel (sharded) rank: today's layout.
  static ParallelDims data_parallel(int world_size);
};

// "dp_replicate 1 x dp_shard 2 x pp 1 x tp 2, ep 2 (experts split over tp)": for errors and logs.
std::string describe(const ParallelDims& dims);

// BadInput (exit 2) naming the sizes and the fix unless: every size >= 1, the product
// dp_replicate x dp_shard x pp x tp equals world_size, and ep fits: with Split it divides
// dp_shard; with Whole it is a multiple of tp and divides dp_shard x tp (torchtitan's
// rules; Megatron's are the same with one data-parallel axis). ep = 1 always fits.
void validate(const ParallelDims& dims, int world_size);

// One rank's coordinates on every axis.
struct MeshCoords {
  int dp_replicate = 0, dp_shard = 0, dp = 0, pp = 0, tp = 0;
  int ep = 0, edp = 0, etp = 0;  // the expert view
};
MeshCoords mesh_coords(const ParallelDims& dims, int rank);

// The groups a mesh splits. Composites: Dp (dp_replicate x dp_shard: dense units' gradient
// reduction and ZeRO partitions), ExpertDp (expert units' reduction and partitions),
// ExpertTp (the tensor group of an expert: Tp's members with Split, this rank alone with
// Whole), TpDp (every rank of this pipeline stage: tp x dp, e.g. a loss or MoE exchange
// within a stage), World (every rank: agreements, the global gradient norm).
enum class MeshAxis { DpReplicate, DpShard, Pp, Tp, Ep, Dp, ExpertDp, ExpertTp, TpDp, World };
constexpr int kMeshAxisCount = static_cast<int>(MeshAxis::World) + 1;
const char* mesh_axis_name(MeshAxis axis);

// The world ranks of `rank`'s group along `axis`, ascending.
std::vector<int> group_members(const ParallelDims& dims, MeshAxis axis, int rank);

class Mesh {
 public:
  // Collective over the world(s): validates dims against host_world's size, then splits
  // every group of more than one rank and fewer than all (host_world, and device_world
  // when given, in the same order on every rank). The owning form keeps the worlds; the
  // borrowing one needs them to outlive the mesh.
  Mesh(const ParallelDims& dims, std::unique_ptr<Communicator> host_world,
       std::unique_ptr<Communicator> device_world = nullptr);
  Mesh(const ParallelDims& dims, Communicator& host_world, Communicator* device_world = nullptr);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const ParallelDims& dims() const { return dims_; }
  const MeshCoords& coords() const { return coords_; }
  const Group& group(MeshAxis axis) const { return groups_[static_cast<size_t>(axis)]; }
  const Group& world() const { return group(MeshAxis::World); }
  const Group& data_parallel() const { return group(MeshAxis::Dp); }
  const Group& expert_data_parallel() const { return group(MeshAxis::ExpertDp); }
  int rank() const { return world().rank(); }
  int size() const { return world().size(); }
  // How many communicators the mesh split (0 for a purely data-parallel mesh): for tests.
  int splits() const { return splits_; }

 private:
  void build(Communicator& host_world, Communicator* device_world);

  ParallelDims dims_;
  MeshCoords coords_;
  std::unique_ptr<Communicator> owned_host_world_, owned_device_world_;
  std::vector<std::unique_ptr<Communicator>> owned_;  // split or single-process groups
  std::array<Group, kMeshAxisCount> groups_;
  int splits_ = 0;
};

}  // namespace zt::comm
