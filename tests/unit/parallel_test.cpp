// set_num_threads caps a count above the machine's cores (with a warning): `--threads
// 100000` oversubscribed every kernel and hung at exit in OpenBLAS's shutdown.
#include <gtest/gtest.h>
#include <omp.h>

#include "core/parallel.h"

namespace zt {
namespace {

TEST(Parallel, ThreadCountsAreCappedToTheCores) {
  const int cores = omp_get_num_procs();
  set_num_threads(100000, "--threads");
  EXPECT_EQ(num_threads(), cores);
  set_num_threads(int64_t{1} << 40, "--threads");  // past int: no wrap-around to a negative count
  EXPECT_EQ(num_threads(), cores);
  set_num_threads(0);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(cores);
  EXPECT_EQ(num_threads(), cores);
}

}  // namespace
}  // namespace zt
