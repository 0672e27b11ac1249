// CUDA ops::gemm (backend/cuda/gemm.cpp) against the CPU backend on the same values: every
// transpose pair, = and +=, alpha, column windows of wider matrices (columns outside out's
// window untouched), the dtype mixes the LoRA path uses (bf16 everywhere; bf16 operands
// into an f32 out) and the widening ones (f32 x bf16; f32 operands into a packed bf16 out),
// and LoRA-like sizes (N = 4096 rows, r = 16).
//
// Metric: max|cuda - cpu| / max(1, max|cpu|) over out's whole wide matrix: f32 <= 1e-5
// (CUBLAS_COMPUTE_32F, no TF32); a 16-bit out <= 1e-2 (one rounding each side).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/gemm.h"

namespace {

using zt::DType;
using zt::GradWrite;
using zt::OwnedTensor;
using zt::Tensor;
using zt::Transpose;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_device;
using zt::testing::to_host;

struct Case {
  int64_t M, N, K;
  Transpose ta, tb;
  GradWrite write;
  float alpha;
  DType a_dt, b_dt, out_dt;
  bool strided;  // operands and out as windows of wider matrices
};

// The same wide matrix on the host and the GPU, and the window view of each.
struct Pair {
  OwnedTensor host, device;
  Tensor host_view, device_view;
};

Pair pair(int64_t rows, int64_t cols, bool strided, DType dt, uint32_t seed) {
  const int64_t extra = strided ? 5 : 0, first = strided ? 3 : 0;
  Pair p;
  p.host = make(randn(static_cast<size_t>(rows * (cols + extra)), seed), {rows, cols + extra}, dt);
  p.device = to_device(p.host);
  p.host_view = p.host->narrow(1, first, cols);
  p.device_view = p.device->narrow(1, first, cols);
  return p;
}

double run_case(const Case& k) {
  const bool ta = k.ta == Transpose::Yes, tb = k.tb == Transpose::Yes;
  Pair a = pair(ta ? k.K : k.M, ta ? k.M : k.K, k.strided, k.a_dt, 11);
  Pair b = pair(tb ? k.N : k.K, tb ? k.K : k.N, k.strided, k.b_dt, 12);
  Pair out = pair(k.M, k.N, k.strided, k.out_dt, 13);
  zt::ops::gemm(out.host_view, a.host_view, k.ta, b.host_view, k.tb, k.alpha, k.write);
  zt::ops::gemm(out.device_view, a.device_view, k.ta, b.device_view, k.tb, k.alpha, k.write);
  const std::vector<float> want = out.host->to_f32_vector();
  const std::vector<float> got = to_host(out.device)->to_f32_vector();
  double worst = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return worst / scale;
}

TEST(CudaGemm, MatchesCpuForEveryTransposeAndWriteOnStridedF32) {
  ZT_REQUIRE_GPU();
  for (Transpose ta : {Transpose::No, Transpose::Yes})
    for (Transpose tb : {Transpose::No, Transpose::Yes})
      for (GradWrite w : {GradWrite::Overwrite, GradWrite::Accumulate}) {
        SCOPED_TRACE(testing::Message() << "ta " << int(ta) << " tb " << int(tb) << " write " << int(w));
        EXPECT_LE(run_case({37, 29, 19, ta, tb, w, -0.625f, DType::F32, DType::F32, DType::F32, true}), 1e-5);
      }
}

TEST(CudaGemm, LoraShapesInBf16AndIntoF32) {
  ZT_REQUIRE_GPU();
  const int64_t N = 4096, in = 512, out = 384, r = 16;
  // h = x A^T; y_window += s h B^T; dB += s dy^T h; dh = s dy B; dA += dh^T x; dx += dh A.
  const Case cases[] = {
      {N, r, in, Transpose::No, Transpose::Yes, GradWrite::Overwrite, 1.0f, DType::BF16, DType::BF16, DType::BF16, true},
      {N, out, r, Transpose::No, Transpose::Yes, GradWrite::Accumulate, 2.0f, DType::BF16, DType::BF16, DType::BF16, true},
      {out, r, N, Transpose::Yes, Transpose::No, GradWrite::Accumulate, 2.0f, DType::BF16, DType::BF16, DType::F32, true},
      {N, r, out, Transpose::No, Transpose::No, GradWrite::Overwrite, 2.0f, DType::BF16, DType::BF16, DType::BF16, true},
      {r, in, N, Transpose::Yes, Transpose::No, GradWrite::Accumulate, 1.0f, DType::BF16, DType::BF16, DType::F32, false},
      {N, in, r, Transpose::No, Transpose::No, GradWrite::Accumulate, 1.0f, DType::BF16, DType::BF16, DType::BF16, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message() << "[" << k.M << ", " << k.N << ", " << k.K << "] ta " << int(k.ta) << " tb "
                                    << int(k.tb) << " out " << zt::dtype_name(k.out_dt));
    EXPECT_LE(run_case(k), k.out_dt == DType::F32 ? 1e-3 : 1e-2);
  }
}

TEST(CudaGemm, WideningMixesNeedPackedOperands) {
  ZT_REQUIRE_GPU();
  EXPECT_LE(run_case({33, 17, 9, Transpose::No, Transpose::Yes, GradWrite::Accumulate, 0.5f, DType::F32, DType::BF16,
                      DType::F32, false}),
            1e-5);
  EXPECT_LE(run_case({33, 17, 9, Transpose::Yes, Transpose::No, GradWrite::Overwrite, 1.5f, DType::F32, DType::F32,
                      DType::BF16, false}),
            1e-2);
  EXPECT_THROW(run_case({33, 17, 9, Transpose::No, Transpose::No, GradWrite::Overwrite, 1.0f, DType::F32,
                         DType::BF16, DType::F32, true}),
               zt::Error);
}

}  // namespace
