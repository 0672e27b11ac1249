#include "backend/cpu/blas_info.h"

#include <cblas.h>

namespace zt::cpu {

namespace {
std::string trimmed(std::string s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}
}  // namespace

BlasInfo blas_info() {
  BlasInfo b;
#ifdef OPENBLAS_VERSION
  b.version = trimmed(OPENBLAS_VERSION);
#else
  b.version = "OpenBLAS";
#endif
  if (const char* c = openblas_get_config()) b.config = trimmed(c);
  if (const char* c = openblas_get_corename()) b.core = c;
  switch (openblas_get_parallel()) {
    case 0:
      b.threading = "sequential";
      break;
    case 1:
      b.threading = "pthreads";
      break;
    case 2:
      b.threading = "OpenMP";
      break;
    default:
      b.threading = "unknown";
      break;
  }
  b.threads = openblas_get_num_threads();
  return b;
}

}  // namespace zt::cpu
