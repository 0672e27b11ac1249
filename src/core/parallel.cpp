#include "core/parallel.h"

#include <omp.h>

#include <cstdlib>
#include <initializer_list>

extern "C" void openblas_set_num_threads(int);

namespace zt {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

void init_threads_from_env() {
  for (const char* var : {"ZT_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) {
        set_num_threads(n);
        return;
      }
    }
  }
  set_num_threads(omp_get_num_procs());
}

}  // namespace zt
