#include "comm/world.h"

#include "backend/cuda_api.h"
#include "core/error.h"
#include "comm/env.h"
#include "comm/single.h"

#if ZT_WITH_MPI
#include "comm/mpi_communicator.h"
#endif
#if ZT_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace zt::comm {

std::unique_ptr<Communicator> make_world_communicator() {
  const LaunchEnv env = read_launch_env();
  if (env.world_size == 1) return std::make_unique<SingleCommunicator>();
#if ZT_WITH_MPI
  auto comm = MpiCommunicator::world();
  if (comm->size() != env.world_size) {
    ZT_THROW_INPUT("the launcher says ", env.world_size, " ranks (", env.source, " variables) but MPI has ",
                   comm->size(), "; start the processes with mpirun or srun, not ", env.source, " alone");
  }
  return comm;
#else
  ZT_THROW_UNSUPPORTED("this process is rank ", env.rank, " of ", env.world_size, " (", env.source,
                       " variables) but zerotrain was built without MPI; "
                       "install libopenmpi-dev and rebuild");
#endif
}

namespace {

#if ZT_WITH_NCCL
// This rank's GPU: its local rank, or 0 when the process sees a single GPU (one
// CUDA_VISIBLE_DEVICES entry per rank).
int select_gpu(const LaunchEnv& env) {
  const int count = cuda::device_count();
  if (count == 0) {
    ZT_THROW_UNSUPPORTED("rank ", env.rank,
                         ": the NCCL communicator needs a GPU but none is "
                         "visible (check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  if (env.local_rank < count) return env.local_rank;
  if (count == 1) return 0;
  ZT_THROW_INPUT("rank ", env.rank, " has local rank ", env.local_rank, " (", env.source, " variables) but sees only ",
                 count, " GPUs; start at most ", count,
                 " ranks per node, or give each rank its own GPU with CUDA_VISIBLE_DEVICES");
}
#else
[[noreturn]] void throw_no_nccl() {
  ZT_THROW_UNSUPPORTED(
      "zerotrain was built without NCCL, which collectives on GPU buffers "
      "need; install NCCL (nccl.h and libnccl.so: the CUDA toolkit's, or "
      "apt-get install libnccl-dev) and rebuild with the CUDA backend "
      "(cmake --preset cuda)");
}
#endif

}  // namespace

std::unique_ptr<Communicator> make_nccl_world_communicator() {
#if ZT_WITH_NCCL
  const LaunchEnv env = read_launch_env();
  if (env.world_size == 1) {
    SingleCommunicator single;
    return make_nccl_world_communicator(single);
  }
  // The MPI world, checked against the launcher; needed only to pass the NCCL unique id.
  auto world = make_world_communicator();
  return make_nccl_world_communicator(*world);
#else
  throw_no_nccl();
#endif
}

std::unique_ptr<Communicator> make_nccl_world_communicator(Communicator& bootstrap) {
#if ZT_WITH_NCCL
  // A GPU chosen already (zt::cuda::init by the caller) is kept.
  if (!cuda::initialized()) cuda::init(select_gpu(read_launch_env()));
  return NcclCommunicator::create(bootstrap);
#else
  (void)bootstrap;
  throw_no_nccl();
#endif
}

}  // namespace zt::comm
