// The BLAS library the CPU backend runs on (OpenBLAS), for `zerotrain report`.
#pragma once
#include <string>

namespace zt::cpu {

struct BlasInfo {
  std::string version;    // from the headers we compiled against, e.g. "OpenBLAS 0.3.21"
  std::string config;     // openblas_get_config() of the loaded library: version, options, core
  std::string core;       // the kernel set chosen for this CPU, e.g. "Haswell", "SkylakeX"
  std::string threading;  // "sequential", "pthreads" or "OpenMP" (how the library was built)
  int threads = 0;        // threads it uses now
};
BlasInfo blas_info();

}  // namespace zt::cpu
