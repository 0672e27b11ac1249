// The MFU denominator: GPU peaks looked up by device name (as cuda::device_info reports
// it), with the source named for the log; ZT_PEAK_TFLOPS overrides; an unknown GPU has
// no peak (no MFU) and says how to give one; the CPU peak names its formula.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "train/metrics.h"

using namespace zt::train;

namespace {

// ZT_PEAK_TFLOPS unset for the test's duration (the CI environment might carry it).
struct NoPeakOverride {
  std::string saved;
  bool had = false;
  NoPeakOverride() {
    if (const char* v = std::getenv("ZT_PEAK_TFLOPS")) {
      had = true;
      saved = v;
    }
    ::unsetenv("ZT_PEAK_TFLOPS");
  }
  ~NoPeakOverride() {
    if (had) ::setenv("ZT_PEAK_TFLOPS", saved.c_str(), 1);
  }
};

}  // namespace

TEST(PeakFlops, GpuNamesFromTheTable) {
  NoPeakOverride guard;
  const PeakFlops h200 = peak_flops(ComputeDevice::GPU, "NVIDIA H200", PeakPrecision::Sixteen);
  EXPECT_DOUBLE_EQ(h200.flops, 989e12);
  EXPECT_EQ(h200.describe(), "989 TFLOPS (NVIDIA H200, dense bf16/fp16 table)");
  EXPECT_DOUBLE_EQ(peak_flops(ComputeDevice::GPU, "NVIDIA H100 80GB HBM3", PeakPrecision::Sixteen).flops, 989e12);
  // The PCIe part is matched before the generic H100 entry.
  EXPECT_DOUBLE_EQ(peak_flops(ComputeDevice::GPU, "NVIDIA H100 PCIe", PeakPrecision::Sixteen).flops, 756e12);
  EXPECT_DOUBLE_EQ(peak_flops(ComputeDevice::GPU, "NVIDIA A100-SXM4-80GB", PeakPrecision::Sixteen).flops, 312e12);
  EXPECT_DOUBLE_EQ(peak_flops(ComputeDevice::GPU, "NVIDIA L40S", PeakPrecision::Sixteen).flops, 362e12);
  const PeakFlops f32 = peak_flops(ComputeDevice::GPU, "NVIDIA H200", PeakPrecision::F32);
  EXPECT_DOUBLE_EQ(f32.flops, 67e12);
  EXPECT_EQ(f32.describe(), "67 TFLOPS (NVIDIA H200, fp32 table)");
}

TEST(PeakFlops, AnUnknownGpuHasNoPeakAndSaysHowToSetOne) {
  NoPeakOverride guard;
  const PeakFlops p = peak_flops(ComputeDevice::GPU, "Some Future GPU", PeakPrecision::Sixteen);
  EXPECT_FALSE(p.known());
  EXPECT_NE(p.describe().find("no MFU"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("Some Future GPU"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("ZT_PEAK_TFLOPS"), std::string::npos) << p.describe();
  // The device string "cuda" is not a GPU name: it must never match the table.
  EXPECT_FALSE(peak_flops(ComputeDevice::GPU, "cuda", PeakPrecision::Sixteen).known());
}

TEST(PeakFlops, TheCpuPeakNamesItsFormula) {
  NoPeakOverride guard;
  const PeakFlops p = peak_flops(ComputeDevice::CPU, "", PeakPrecision::F32);
  EXPECT_TRUE(p.known());
  EXPECT_LT(p.flops, 1e14);  // a CPU, not a GPU's table entry
  EXPECT_EQ(p.source.rfind("CPU: ", 0), 0u) << p.source;
  EXPECT_NE(p.source.find(" cores x "), std::string::npos) << p.source;
  EXPECT_NE(p.source.find(" GHz"), std::string::npos) << p.source;
}

TEST(PeakFlops, TheEnvironmentOverrides) {
  NoPeakOverride guard;
  ::setenv("ZT_PEAK_TFLOPS", "123.5", 1);
  for (ComputeDevice d : {ComputeDevice::CPU, ComputeDevice::GPU}) {
    const PeakFlops p = peak_flops(d, "NVIDIA H200", PeakPrecision::Sixteen);
    EXPECT_DOUBLE_EQ(p.flops, 123.5e12);
    EXPECT_EQ(p.describe(), "123.5 TFLOPS (ZT_PEAK_TFLOPS)");
  }
  ::unsetenv("ZT_PEAK_TFLOPS");
}
