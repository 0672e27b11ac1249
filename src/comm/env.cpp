#include "comm/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/env_vars.h"
#include "core/error.h"

namespace zt::comm {

namespace {

const char* system_lookup(const char* name) { return std::getenv(name); }

int parse_int(const char* name, const char* value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || v < 0 || v > 1 << 30) {
    ZT_THROW_INPUT("environment variable ", name, "='", value,
                   "' is not a non-negative integer; unset it or fix the launcher");
  }
  return static_cast<int>(v);
}

struct Scheme {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr Scheme kSchemes[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

}  // namespace

LaunchEnv read_launch_env() { return read_launch_env(system_lookup); }

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  for (const Scheme& s : kSchemes) {
    const char* rank = lookup(s.rank);
    if (rank == nullptr) continue;
    LaunchEnv env;
    env.source = s.source;
    env.rank = parse_int(s.rank, rank);
    const char* size = lookup(s.world_size);
    if (size == nullptr) {
      ZT_THROW_INPUT(s.rank, " is set but ", s.world_size, " is not; the launcher must set both (or neither)");
    }
    env.world_size = parse_int(s.world_size, size);
    if (env.world_size < 1 || env.rank >= env.world_size) {
      ZT_THROW_INPUT(s.rank, "=", env.rank, " is not a rank of ", s.world_size, "=", env.world_size,
                     "; fix the launcher's variables");
    }
    // A missing local rank means one process per node, as a bare `srun -n N` on N nodes.
    const char* local = lookup(s.local_rank);
    env.local_rank = local ? parse_int(s.local_rank, local) : 0;
    const char* local_size = s.local_world_size ? lookup(s.local_world_size) : nullptr;
    env.local_world_size = local_size ? parse_int(s.local_world_size, local_size) : env.local_rank + 1;
    if (env.local_world_size < 1 || env.local_rank >= env.local_world_size) {
      ZT_THROW_INPUT(s.local_rank, "=", env.local_rank, " is not below the local world size ", env.local_world_size,
                     "; fix the launcher's variables");
    }
    return env;
  }
  return LaunchEnv{};
}

std::chrono::duration<double> collective_timeout_from_env() { return collective_timeout_from_env(system_lookup); }

std::chrono::duration<double> collective_timeout_from_env(const EnvLookup& lookup) {
  const char* value = lookup(env_name(EnvVar::CollectiveTimeoutS));
  if (value == nullptr || *value == '\0') {
    return std::chrono::duration<double>(kDefaultCollectiveTimeoutS);
  }
  char* end = nullptr;
  const double s = std::strtod(value, &end);
  if (end == value || *end != '\0' || !std::isfinite(s) || s <= 0) {
    ZT_THROW_INPUT("ZT_COLLECTIVE_TIMEOUT_S='", value,
                   "' is not a positive number of seconds; set e.g. ZT_COLLECTIVE_TIMEOUT_S=300 "
                   "or unset it for the default");
  }
  return std::chrono::duration<double>(s);
}

}  // namespace zt::comm
