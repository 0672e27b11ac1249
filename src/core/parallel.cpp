#include "core/parallel.h"

#include <omp.h>

#include <cstdlib>
#include <initializer_list>
#include <utility>

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
  const std::pair<const char*, const char*> sources[] = {{env_name(EnvVar::NumThreads), env_value(EnvVar::NumThreads)},
                                                         {"OMP_NUM_THREADS", std::getenv("OMP_NUM_THREADS")}};
  for (const auto& [var, v] : sources) {
    if (v) {
      const long long n = std::atoll(v);
      if (n > 0) {
        set_num_threads(n, var);
        return;
      }
    }
  }
  set_num_threads(omp_get_num_procs());
}

}  // namespace zt
