// set_num_threads caps a count above the machine's cores (with a warning): `--threads
// 100000` oversubscribed every kernel and hung at exit in OpenBLAS's shutdown.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "core/env_vars.h"
#include "core/error.h"
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

// ZT_NUM_THREADS=abc (or 0, 2.5, 4x) was ignored and all cores used: a typo must be an
// error (exit 2) naming the variable, not a silent default.
TEST(Parallel, ABadZtNumThreadsIsAnErrorNamingIt) {
  const int before = num_threads();
  for (const char* bad : {"abc", "0", "-3", "2.5", "4x", "99999999999999999999"}) {
    ::setenv("ZT_NUM_THREADS", bad, 1);
    try {
      init_threads_from_env();
      ADD_FAILURE() << "ZT_NUM_THREADS=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find("ZT_NUM_THREADS='" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
  ::setenv("ZT_NUM_THREADS", "1", 1);
  init_threads_from_env();
  EXPECT_EQ(num_threads(), 1);
  ::unsetenv("ZT_NUM_THREADS");
  set_num_threads(before);
}

TEST(Parallel, ABadZtPeakTflopsIsAnErrorNamingIt) {
  ::setenv("ZT_PEAK_TFLOPS", "fast", 1);
  EXPECT_THROW(env_positive_number(EnvVar::PeakTflops, "measure"), Error);
  ::setenv("ZT_PEAK_TFLOPS", "measure", 1);
  EXPECT_FALSE(env_positive_number(EnvVar::PeakTflops, "measure").has_value());
  ::setenv("ZT_PEAK_TFLOPS", "989", 1);
  EXPECT_EQ(env_positive_number(EnvVar::PeakTflops, "measure").value_or(0), 989.0);
  ::unsetenv("ZT_PEAK_TFLOPS");
}

}  // namespace
}  // namespace zt
