// ops::fill_normal on device tensors against the host's fill_normal: the device runs
// core/rng.h's Philox and normal_pair with IEEE-rounded intrinsics, so every value must be
// the host's bit for bit (f32, and bf16/f16 rounded the same way), at sizes around the
// 4-element Philox block and the 8-element chunk, unaligned views, and seeds/streams with
// high 32-bit halves. A GPU model's random init then equals the host's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cuda_tensor.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/transformer.h"
#include "ops/random.h"

namespace {

using namespace zt;
using zt::testing::to_host;

int64_t first_byte_difference(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const unsigned char*>(a.data());
  const auto* pb = static_cast<const unsigned char*>(b.data());
  const size_t es = dtype_size(a.dtype());
  for (size_t i = 0; i < a.nbytes(); ++i)
    if (pa[i] != pb[i]) return static_cast<int64_t>(i / es);
  return -1;
}

TEST(CudaFillNormal, EveryValueIsTheHostsBitForBit) {
  ZT_REQUIRE_GPU();
  const std::vector<Philox> streams = {Philox(0, 0), Philox(42, 7),
                                       Philox(0x0123456789abcdefULL, 0xfedcba9876543210ULL)};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 17, 1001, 70001, (1 << 21) + 5})
      for (int64_t offset : {0, 1})
        for (const Philox& rng : streams) {
          SCOPED_TRACE(str(dtype_name(dtype), " n=", n, " offset=", offset, " stream ", rng.stream()));
          OwnedTensor want({n}, dtype);
          fill_normal(want, rng, 0.25f, 0.02f);
          OwnedTensor storage({n + offset}, dtype, Device::cuda());
          const Tensor got = storage->narrow(0, offset, n);
          ops::fill_normal(got, rng, 0.25f, 0.02f);
          const OwnedTensor back = to_host(got);
          ASSERT_EQ(first_byte_difference(back, want), -1);
        }
}

// A model built on the GPU and initialised there equals the same model initialised on the
// host (every parameter, bit for bit): tiny GPT-2 and Llama shapes, f32 and bf16.
TEST(CudaFillNormal, GpuModelInitIsTheHostsInit) {
  ZT_REQUIRE_GPU();
  for (const char* preset : {"tiny-gpt2", "tiny-llama"})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(str(preset, " ", dtype_name(dtype)));
      const model::ModelConfig config = model::preset_config(preset);
      model::ModelOptions host_options, gpu_options;
      host_options.param_dtype = gpu_options.param_dtype = dtype;
      host_options.grad_dtype = gpu_options.grad_dtype = dtype;
      gpu_options.device = Device::cuda();
      model::Transformer host(config, host_options), gpu(config, gpu_options);
      host.init_weights(1234);
      gpu.init_weights(1234);
      ASSERT_EQ(host.registry().size(), gpu.registry().size());
      for (size_t u = 0; u < host.registry().size(); ++u) {
        const OwnedTensor back = to_host(gpu.registry().unit(u).flat_params());
        ASSERT_EQ(first_byte_difference(back, host.registry().unit(u).flat_params()), -1)
            << "unit " << host.registry().unit(u).name();
      }
    }
}

}  // namespace
