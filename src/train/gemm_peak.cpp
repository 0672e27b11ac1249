#include "train/gemm_peak.h"

#include <chrono>

#include "backend/cuda_api.h"
#include "backend/weight_layout.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/linear.h"

namespace zt::train {
namespace {

// n x n in dtype on the device, N(0, 1) values drawn on the host.
OwnedTensor random_device_matrix(int64_t n, DType dtype, uint64_t seed) {
  OwnedTensor host({n, n}, DType::F32);
  fill_normal(host, Philox(seed, 0x9e3779b9ull), 0.0f, 1.0f);
  OwnedTensor staged({n, n}, DType::F32, Device::cuda());
  cuda::copy_to_device(staged->data(), host->data(), host->nbytes());
  OwnedTensor d({n, n}, dtype, Device::cuda());
  cuda::convert_on_device(staged->data(), DType::F32, d->data(), dtype, static_cast<size_t>(n * n));
  return d;
}

}  // namespace

double measure_gemm_flops(DType dtype, int64_t n, int reps) {
  ZT_CHECK(n > 0 && reps > 0, "measure_gemm_flops: n and reps must be positive");
  const OwnedTensor a = random_device_matrix(n, dtype, 1), w = random_device_matrix(n, dtype, 2);
  OwnedTensor out({n, n}, dtype, Device::cuda());
  for (int i = 0; i < 3; ++i) ops::linear_forward(out, a, w, Tensor(), WeightLayout::OutIn);
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) ops::linear_forward(out, a, w, Tensor(), WeightLayout::OutIn);
  cuda::synchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * reps / secs;
}

}  // namespace zt::train
