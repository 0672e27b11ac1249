// Threading policy: OpenMP for data-parallel loops inside kernels. One place decides the
// thread count (ZT_NUM_THREADS, else OMP_NUM_THREADS, else all cores) so that kernels,
// OpenBLAS and tests agree.
#pragma once
#include <cstdint>

namespace zt {

int num_threads();
void set_num_threads(int n);
// Applies the environment's choice once at start-up (also sets OpenBLAS's count).
void init_threads_from_env();

}  // namespace zt
