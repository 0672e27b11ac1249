// The communicator a program starts with: MPI over all ranks when a launcher started
// several processes, the single-process communicator otherwise (no MPI start-up cost,
// and a build without MPI still runs one process). For device buffers: the NCCL one.
#pragma once
#include <memory>

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

}  // namespace zt::comm
