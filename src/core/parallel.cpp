#include "core/parallel.h"

#include <omp.h>

#include <cstdlib>
#include <optional>

#include "core/env_vars.h"
#include "core/log.h"

extern "C" void openblas_set_num_threads(int);

namespace zt {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int64_t n, const char* source) {
  if (n < 1) n = 1;
  const int cores = omp_get_num_procs();
  if (n > cores) {
    ZT_WARN(source, " ", n, " is more than this machine's ", cores, " cores; using ", cores, " threads");
    n = cores;
  }
  omp_set_num_threads(static_cast<int>(n));
  openblas_set_num_threads(static_cast<int>(n));
}

void init_threads_from_env() {
  // ZT_NUM_THREADS is ours: anything but a whole number >= 1 is an error naming it.
  // OMP_NUM_THREADS is OpenMP's (it may be a per-level list, "8,2"): its first number,
  // else ignored as before.
  if (const std::optional<int64_t> n = env_int(EnvVar::NumThreads, 1, 1 << 20)) {
    set_num_threads(*n, env_name(EnvVar::NumThreads));
    return;
  }
  if (const char* v = std::getenv("OMP_NUM_THREADS")) {
    const long long n = std::atoll(v);
    if (n > 0) {
      set_num_threads(n, "OMP_NUM_THREADS");
      return;
    }
  }
  set_num_threads(omp_get_num_procs());
}

}  // namespace zt
