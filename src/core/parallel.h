// Threading policy: OpenMP for data-parallel loops inside kernels. One place decides the
// thread count (ZT_NUM_THREADS, else OMP_NUM_THREADS, else all cores) so that kernels,
// OpenBLAS and tests agree.
#pragma once
#include <cstdint>

namespace zt {

int num_threads();
// Sets the OpenMP and OpenBLAS thread counts. A count above the machine's cores is capped
// to the cores with a warning naming `source` (e.g. "--threads"): more threads than cores
// only oversubscribe, and OpenBLAS with tens of thousands of threads hangs at exit.
// Counts below 1 mean 1.
void set_num_threads(int64_t n, const char* source = "thread count");
// Applies the environment's choice once at start-up (also sets OpenBLAS's count).
void init_threads_from_env();

}  // namespace zt
