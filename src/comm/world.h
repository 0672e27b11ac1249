// The communicator a program starts with: MPI over all ranks when a launcher started
// several processes, the single-process communicator otherwise (no MPI start-up cost,
// and a build without MPI still runs one process). For device buffers: NCCL when each rank
// has a GPU of its own, the staged communicator (comm/staged_device_communicator.h) when
// ranks share one.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt::comm {

std::unique_ptr<Communicator> make_world_communicator();

// The NCCL communicator (device buffers, comm/nccl_communicator.h) over all ranks: selects
// this rank's GPU (zt::cuda::init with LOCAL_RANK; cuda:0 when the rank sees a single GPU, as
// with one CUDA_VISIBLE_DEVICES entry per rank), then bootstraps NCCL over the MPI world, or
// locally for a single process (no MPI). Collective over all ranks. The timeout is
// ZT_COLLECTIVE_TIMEOUT_S. Throws Unsupported (naming the fix) in a build without NCCL, or
// without a GPU for this rank.
std::unique_ptr<Communicator> make_nccl_world_communicator();
// The same over an existing host communicator (e.g. the program's MPI world), collective
// over it: its rank 0 makes the NCCL unique id and broadcasts it there.
std::unique_ptr<Communicator> make_nccl_world_communicator(Communicator& bootstrap);

// ZT_DEVICE_COMM: which device communicator make_device_world_communicator() makes.
enum class DeviceCommChoice {
  Auto,    // NCCL when every rank has a GPU of its own, staged when two ranks share one
  Nccl,    // NCCL (an error, naming the ranks, when two share a GPU)
  Staged,  // staged through host memory over the host communicator
};
// The variable's value: unset or empty is Auto; anything but auto|nccl|staged is BadInput
// naming the variable and the values.
DeviceCommChoice device_comm_choice(const char* value);
DeviceCommChoice device_comm_choice_from_env();

// Which ranks share a device, from every rank's device id (the GPU's UUID) in rank order:
// how many ranks have rank 0's device (1: rank 0's GPU is its own), and whether any two
// ranks have the same.
struct DeviceSharing {
  int ranks_on_rank0_device = 1;
  bool any_shared = false;
  int first = -1, second = -1;  // the lowest pair of ranks with one device (-1: none)
};
DeviceSharing device_sharing(const std::vector<std::string>& device_ids);

// The device communicator over all ranks of `host_world` (the program's host communicator:
// MPI, or single for one process), collective over it. Selects this rank's GPU first when
// none is (cuda::init with the local rank modulo the visible GPUs, so ranks beyond the GPU
// count share them), then compares the GPUs' UUIDs over host_world and makes, by
// ZT_DEVICE_COMM: NCCL when each rank has its own GPU; the staged communicator when two
// ranks share one (or when it says staged, or when the build has no NCCL). Rank 0 logs the
// choice in one line. Throws Unsupported without a GPU.
std::unique_ptr<Communicator> make_device_world_communicator(Communicator& host_world);

}  // namespace zt::comm
