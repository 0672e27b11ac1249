// The host's random fills (backend/random_kernels.h): core/rng.h's, which every host-only
// caller uses directly.
#include "backend/random_kernels.h"

namespace zt::cpu {

void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev) {
  ::zt::fill_normal(t, rng, mean, stddev);
}

}  // namespace zt::cpu
