#include "dist/world.h"

#include "core/error.h"
#include "dist/env.h"
#include "dist/single.h"

#if ZT_WITH_MPI
#include "dist/mpi_communicator.h"
#endif

namespace zt::dist {

std::unique_ptr<Communicator> make_world_communicator() {
  const LaunchEnv env = read_launch_env();
  if (env.world_size == 1) return std::make_unique<SingleCommunicator>();
#if ZT_WITH_MPI
  auto comm = MpiCommunicator::world();
  if (comm->size() != env.world_size) {
    ZT_THROW_INPUT("the launcher says ", env.world_size, " ranks (", env.source,
                   " variables) but MPI has ", comm->size(),
                   "; start the processes with mpirun or srun, not ", env.source, " alone");
  }
  return comm;
#else
  ZT_THROW_UNSUPPORTED("this process is rank ", env.rank, " of ", env.world_size, " (",
                       env.source, " variables) but zerotrain was built without MPI; "
                       "install libopenmpi-dev and rebuild");
#endif
}

}  // namespace zt::dist
