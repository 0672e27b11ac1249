// Where this process sits in the job, read from the variables launchers set:
//   torchrun / accelerate:  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
//   OpenMPI (mpirun):       OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE
//   MPICH / Intel MPI:      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   SLURM (srun):           SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS
// checked in that order (an mpirun inside a SLURM allocation sets both; its own are right).
// With none set: rank 0 of 1 (a plain single process).
#pragma once
#include <chrono>
#include <functional>
#include <string>

namespace zt::comm {

struct LaunchEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;        // 1 when the launcher does not say
  std::string source = "default";  // "torchrun", "openmpi", "pmi", "slurm", "default"
};

// Returns nullptr for an unset variable (like std::getenv); tests pass a map.
using EnvLookup = std::function<const char*(const char*)>;

// Throws BadInput naming the variable for a non-integer value or a rank outside the world.
LaunchEnv read_launch_env();
LaunchEnv read_launch_env(const EnvLookup& lookup);

// The collective timeout: ZT_COLLECTIVE_TIMEOUT_S (seconds, > 0), default 300 s.
// Throws BadInput for a value that is not a positive number.
inline constexpr double kDefaultCollectiveTimeoutS = 300.0;
std::chrono::duration<double> collective_timeout_from_env();
std::chrono::duration<double> collective_timeout_from_env(const EnvLookup& lookup);

}  // namespace zt::comm
