// train::measure_gemm_flops, the MFU denominator of GPUs the peak table does not list: a
// plausible dense throughput for each 16-bit dtype (above 10 TFLOP/s, the slowest part
// the table lists has 65; below the fastest dense peak there is, 2.5 PFLOP/s), and on an
// H100/H200 within the 600-1000 TFLOP/s that a dense bf16 GEMM reaches there.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "train/gemm_peak.h"

namespace {

using zt::DType;

TEST(CudaGemmPeak, MeasuredThroughputIsPlausible) {
  ZT_REQUIRE_GPU();
  const std::string name = zt::cuda::device_info(zt::cuda::current_device()).name;
  for (DType dt : {DType::BF16, DType::F16}) {
    const double flops = zt::train::measure_gemm_flops(dt, 4096, 5);
    std::printf("[gemm-peak] %s %s: %.0f TFLOP/s\n", name.c_str(), zt::dtype_name(dt), flops / 1e12);
    EXPECT_GT(flops, 10e12) << zt::dtype_name(dt);
    EXPECT_LT(flops, 2.5e15) << zt::dtype_name(dt);
    if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
      EXPECT_GT(flops, 400e12) << zt::dtype_name(dt);
      EXPECT_LT(flops, 1000e12) << zt::dtype_name(dt);
    }
  }
}

}  // namespace
