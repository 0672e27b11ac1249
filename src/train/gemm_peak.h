// The MFU denominator measured on the run's GPU, for GPUs the peak table does not list (or
// when ZT_PEAK_TFLOPS=measure asks for it): the throughput of a large dense GEMM.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zt::train {

// FLOP/s of an n x n x n product in `dtype` (bf16, f16 or f32) on normal random data (a
// product of zeros draws less power and runs faster, which would flatter the peak),
// through ops::linear_forward, the model's own matmul path: 3 warm-up products, then
// `reps` timed between two device synchronisations. Needs cuda::init(); about 0.1 s on an
// H100-class GPU.
double measure_gemm_flops(DType dtype, int64_t n = 8192, int reps = 10);

}  // namespace zt::train
