#include "comm/mesh.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "comm/single.h"
#include "core/error.h"

namespace zt::comm {

ParallelDims ParallelDims::data_parallel(int world_size) {
  ParallelDims d;
  d.dp_shard = world_size;
  return d;
}

std::string describe(const ParallelDims& d) {
  return str("dp_replicate ", d.dp_replicate, " x dp_shard ", d.dp_shard, " x pp ", d.pp, " x tp ", d.tp, ", ep ", d.ep,
             d.expert_tensor == ExpertTensor::Split ? " (experts split over tp)" : " (experts whole per rank)");
}

void validate(const ParallelDims& d, int world_size) {
  const std::pair<const char*, int> sizes[] = {
      {"dp_replicate", d.dp_replicate}, {"dp_shard", d.dp_shard}, {"pp", d.pp}, {"tp", d.tp}, {"ep", d.ep}};
  for (const auto& [name, n] : sizes)
    if (n < 1) ZT_THROW_INPUT("parallel sizes ", describe(d), ": ", name, " = ", n, " must be at least 1");
  // In 64 bits: four sizes of up to 2^31 each.
  const int64_t product = static_cast<int64_t>(d.dp_replicate) * d.dp_shard * d.pp * d.tp;
  if (product != world_size)
    ZT_THROW_INPUT("parallel sizes ", describe(d), ": dp_replicate x dp_shard x pp x tp = ", product,
                   " but the job has ", world_size, " rank(s): choose sizes whose product is the number of processes");
  if (d.ep == 1) return;
  if (d.expert_tensor == ExpertTensor::Split && d.dp_shard % d.ep != 0)
    ZT_THROW_INPUT("parallel sizes ", describe(d), ": expert parallelism borrows data-parallel ranks, so ep ", d.ep,
                   " must divide dp_shard ", d.dp_shard,
                   ": choose an ep that divides it (or experts whole per rank, which borrow the tp ranks too)");
  if (d.expert_tensor == ExpertTensor::Whole && (d.ep % d.tp != 0 || (d.dp_shard * d.tp) % d.ep != 0))
    ZT_THROW_INPUT("parallel sizes ", describe(d),
                   ": experts whole per rank borrow every tp rank and then "
                   "data-parallel ones, so ep ",
                   d.ep, " must be a multiple of tp ", d.tp, " and divide dp_shard x tp ", d.dp_shard * d.tp,
                   ": choose such an ep");
}

MeshCoords mesh_coords(const ParallelDims& d, int rank) {
  MeshCoords c;
  const int stage_ranks = d.tp * d.dp();
  c.tp = rank % d.tp;
  c.dp = (rank / d.tp) % d.dp();
  c.pp = rank / stage_ranks;
  c.dp_shard = c.dp % d.dp_shard;
  c.dp_replicate = c.dp / d.dp_shard;
  const int s = rank % stage_ranks;
  c.etp = s % d.etp();
  c.ep = (s / d.etp()) % d.ep;
  c.edp = s / (d.etp() * d.ep);
  return c;
}

const char* mesh_axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::DpReplicate:
      return "dp_replicate";
    case MeshAxis::DpShard:
      return "dp_shard";
    case MeshAxis::Pp:
      return "pp";
    case MeshAxis::Tp:
      return "tp";
    case MeshAxis::Ep:
      return "ep";
    case MeshAxis::Dp:
      return "dp";
    case MeshAxis::ExpertDp:
      return "expert_dp";
    case MeshAxis::ExpertTp:
      return "expert_tp";
    case MeshAxis::TpDp:
      return "tp_dp";
    case MeshAxis::World:
      return "world";
  }
  return "?";
}

namespace {

// Whether ranks with coordinates a and b are in one group along `axis`: they agree on
// every coordinate the group does not span.
bool same_group(MeshAxis axis, const MeshCoords& a, const MeshCoords& b) {
  switch (axis) {
    case MeshAxis::DpReplicate:
      return a.pp == b.pp && a.tp == b.tp && a.dp_shard == b.dp_shard;
    case MeshAxis::DpShard:
      return a.pp == b.pp && a.tp == b.tp && a.dp_replicate == b.dp_replicate;
    case MeshAxis::Pp:
      return a.tp == b.tp && a.dp == b.dp;
    case MeshAxis::Tp:
      return a.pp == b.pp && a.dp == b.dp;
    case MeshAxis::Ep:
      return a.pp == b.pp && a.etp == b.etp && a.edp == b.edp;
    case MeshAxis::Dp:
      return a.pp == b.pp && a.tp == b.tp;
    case MeshAxis::ExpertDp:
      return a.pp == b.pp && a.etp == b.etp && a.ep == b.ep;
    case MeshAxis::ExpertTp:
      return a.pp == b.pp && a.ep == b.ep && a.edp == b.edp;
    case MeshAxis::TpDp:
      return a.pp == b.pp;
    case MeshAxis::World:
      return true;
  }
  return false;
}

}  // namespace

std::vector<int> group_members(const ParallelDims& d, MeshAxis axis, int rank) {
  const MeshCoords mine = mesh_coords(d, rank);
  std::vector<int> members;
  for (int q = 0; q < d.world_size(); ++q)
    if (same_group(axis, mine, mesh_coords(d, q))) members.push_back(q);
  return members;
}

Mesh::Mesh(const ParallelDims& dims, std::unique_ptr<Communicator> host_world,
           std::unique_ptr<Communicator> device_world)
    : dims_(dims), owned_host_world_(std::move(host_world)), owned_device_world_(std::move(device_world)) {
  ZT_CHECK(owned_host_world_, "a mesh needs a host world communicator");
  build(*owned_host_world_, owned_device_world_.get());
}

Mesh::Mesh(const ParallelDims& dims, Communicator& host_world, Communicator* device_world) : dims_(dims) {
  build(host_world, device_world);
}

void Mesh::build(Communicator& host_world, Communicator* device_world) {
  validate(dims_, host_world.size());
  const int world = host_world.size(), rank = host_world.rank();
  coords_ = mesh_coords(dims_, rank);
  // Which earlier axis has the same groups as `axis` on every rank (then its communicators
  // serve both): a property of the sizes alone, so every rank decides alike.
  const auto same_as_earlier = [&](int axis) {
    for (int earlier = 0; earlier < axis; ++earlier) {
      bool same = true;
      for (int q = 0; q < world && same; ++q)
        same = group_members(dims_, static_cast<MeshAxis>(earlier), q) ==
               group_members(dims_, static_cast<MeshAxis>(axis), q);
      if (same) return earlier;
    }
    return -1;
  };
  for (int a = 0; a < kMeshAxisCount; ++a) {
    const MeshAxis axis = static_cast<MeshAxis>(a);
    const std::vector<int> members = group_members(dims_, axis, rank);
    const int size = static_cast<int>(members.size());
    if (size == world) {
      groups_[a] = Group(host_world, device_world);
      continue;
    }
    if (size == 1) {
      // This rank alone: nothing to split; the single-process communicator also takes
      // device buffers.
      owned_.push_back(std::make_unique<SingleCommunicator>());
      Communicator& host = *owned_.back();
      Communicator* device = nullptr;
      if (device_world) {
        owned_.push_back(std::make_unique<SingleCommunicator>());
        device = owned_.back().get();
      }
      groups_[a] = Group(host, device);
      continue;
    }
    if (const int earlier = same_as_earlier(a); earlier >= 0) {
      groups_[a] = groups_[earlier];
      continue;
    }
    // Colour: the group's first member; key: the world rank (members in rank order).
    owned_.push_back(host_world.split(members.front(), rank));
    Communicator& host = *owned_.back();
    Communicator* device = nullptr;
    if (device_world) {
      owned_.push_back(device_world->split(members.front(), rank));
      device = owned_.back().get();
    }
    ++splits_;
    ZT_CHECK(host.size() == size &&
                 host.rank() == static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()),
             "the ", mesh_axis_name(axis), " group split with ", host.size(), " ranks, expected ", size);
    groups_[a] = Group(host, device);
  }
}

}  // namespace zt::comm
