// Packed SFT samples on the GPU (model::Transformer's segment_starts): one forward/backward of
// tiny GPT-2 and tiny Llama on windows packing several samples gives the CPU's loss and
// every gradient (the CPU itself equals each sample run alone: tests/unit/
// packed_samples_test.cpp), with f32 and bf16 activations, with and without activation
// checkpointing. This covers the segmented attention kernels in a model (the FMA ones: the
// tiny models' head dim is 32; the tensor-core ones are checked in packed_attention_test),
// the per-token rope rows and the gathered position rows on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "common/cuda_tensor.h"
#include "model/transformer.h"
#include "ops/copy.h"

using namespace zt;

namespace {

model::ModelConfig tiny(const char* preset) {
  model::ModelConfig c = model::preset_config(preset);
  c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
  return c;
}

double rel_diff(const Tensor& a_any, const Tensor& b_host) {
  OwnedTensor a(a_any.shape(), DType::F32), b(b_host.shape(), DType::F32);
  ops::copy(a, a_any);
  ops::copy(b, b_host);
  const std::vector<float> va = a->to_f32_vector(), vb = b->to_f32_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
  }
  return diff / std::max(scale, 1e-30);
}

void compare_packed_step(const char* preset, DType activations, model::Checkpointing checkpointing,
                         double tolerance) {
  const model::ModelConfig c = tiny(preset);
  model::ModelOptions cpu_o, gpu_o;
  gpu_o.device = Device::cuda();
  gpu_o.activation_dtype = activations;
  gpu_o.checkpointing = checkpointing;
  model::Transformer cpu(c, cpu_o), gpu(c, gpu_o);
  cpu.init_weights(7);
  gpu.init_weights(7);
  // Row 0: samples of 1, 70, 40 and 17 tokens; row 1: 64, 64 (tile edges), row 2: one sample.
  const int64_t B = 3, T = 128;
  const std::vector<std::vector<int64_t>> lengths = {{1, 70, 40, 17}, {64, 64}, {128}};
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32), seg({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) {
    tok.data<int32_t>()[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab_size);
    tgt.data<int32_t>()[i] = i % 7 == 2 ? -100 : static_cast<int32_t>((i * 104729 + 5) % c.vocab_size);
  }
  for (int64_t b = 0; b < B; ++b) {
    int64_t at = 0;
    for (int64_t n : lengths[static_cast<size_t>(b)]) {
      for (int64_t i = 0; i < n; ++i) seg.data<int32_t>()[b * T + at + i] = static_cast<int32_t>(at);
      at += n;
    }
  }
  const float scale = 1.0f / static_cast<float>(B * T);
  const auto rc = cpu.forward_backward(tok, tgt, scale, seg);
  const auto rg = gpu.forward_backward(tok, tgt, scale, seg);
  EXPECT_EQ(rg.count, rc.count);
  EXPECT_NEAR(rg.loss_sum / rg.count, rc.loss_sum / rc.count, tolerance * rc.loss_sum / rc.count) << preset;
  for (size_t u = 0; u < cpu.registry().size(); ++u) {
    const double d = rel_diff(gpu.registry().unit(u).flat_grads(), cpu.registry().unit(u).flat_grads());
    EXPECT_LE(d, tolerance) << preset << " " << dtype_name(activations) << " unit " << cpu.registry().unit(u).name();
    std::printf("[packed gpu-vs-cpu] %s %s%s unit %-8s grad max rel diff %.2e\n", preset, dtype_name(activations),
                checkpointing == model::Checkpointing::EveryBlock ? " ckpt" : "",
                cpu.registry().unit(u).name().c_str(), d);
  }
}

TEST(CudaPackedModel, ForwardBackwardMatchesCpuF32) {
  ZT_REQUIRE_GPU();
  compare_packed_step("tiny-gpt2", DType::F32, model::Checkpointing::None, 1e-4);
  compare_packed_step("tiny-llama", DType::F32, model::Checkpointing::None, 1e-4);
  compare_packed_step("tiny-llama", DType::F32, model::Checkpointing::EveryBlock, 1e-4);
}

TEST(CudaPackedModel, ForwardBackwardMatchesCpuBf16Activations) {
  ZT_REQUIRE_GPU();
  compare_packed_step("tiny-gpt2", DType::BF16, model::Checkpointing::None, 3e-2);
  compare_packed_step("tiny-llama", DType::BF16, model::Checkpointing::None, 3e-2);
  compare_packed_step("tiny-gpt2", DType::BF16, model::Checkpointing::EveryBlock, 3e-2);
}

}  // namespace
