#include "comm/abort.h"

#include <cstdio>
#include <cstdlib>

#include "comm/env.h"

#if ZT_WITH_MPI
#include <mpi.h>
#endif

namespace zt::comm {

void abort_job(const std::string& why, int exit_code) {
  int rank = 0;
  int size = 1;
  bool mpi_live = false;
#if ZT_WITH_MPI
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  mpi_live = initialized && !finalized;
  if (mpi_live) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
#endif
  if (!mpi_live) {
    try {
      const LaunchEnv env = read_launch_env();
      rank = env.rank;
      size = env.world_size;
    } catch (...) {
      // A malformed launcher variable must not hide the message we are about to print.
    }
  }
  std::fprintf(stderr, "zerotrain: rank %d of %d: %s\n", rank, size, why.c_str());
  std::fflush(stderr);
#if ZT_WITH_MPI
  if (mpi_live) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  // No MPI job to end: this process is the job. _Exit skips static destructors, which
  // could block on the very resources that failed.
  std::_Exit(exit_code);
}

}  // namespace zt::comm
