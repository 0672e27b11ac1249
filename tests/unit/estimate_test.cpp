// zerotrain estimate's figures (train/estimate.h): the activation count is what a model
// allocates at its first step, DeepSpeed's formulas give DeepSpeed's numbers, and the GPU
// figures agree with the peaks measured on the H100/H200 (bench/NOTES.md).
#include "train/estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cross_entropy_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/transformer.h"

namespace zt::train {
namespace {

// model::activation_bytes counts what ensure_activations allocates, for every variant.
TEST(Estimate, ActivationBytesAreWhatAStepAllocates) {
  for (const char* preset : {"tiny-gpt2", "tiny-llama"})
    for (auto ck : {model::Checkpointing::None, model::Checkpointing::EveryBlock}) {
      SCOPED_TRACE(std::string(preset) + (ck == model::Checkpointing::None ? " no checkpointing" : " checkpointing"));
      const model::ModelConfig c = model::preset_config(preset);
      model::ModelOptions o;
      o.checkpointing = ck;
      model::Transformer m(c, o);
      m.init_weights(1);
      EXPECT_EQ(m.allocated_activation_bytes(), 0);
      const int64_t B = 2, T = 24;
      OwnedTensor tokens({B, T}, DType::I32), targets({B, T}, DType::I32);
      for (int64_t i = 0; i < B * T; ++i) {
        tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % c.vocab_size);
        targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % c.vocab_size);
      }
      m.forward_backward(tokens, targets, 1.0f);
      EXPECT_EQ(m.allocated_activation_bytes(), model::activation_bytes(c, DType::F32, ck, B, T));
    }
}

// The CUDA LM head's chunking (one rule for the kernel and the estimate), on the shapes
// the kernel's notes give: GPT-2 at N = 16384 takes 2 chunks of 8192 rows (one chunk of
// all rows would be 1.6 GiB > 0.8 GiB + the 0.3 GiB f32 accumulator); Llama-3.2-1B at
// N = 8192 takes one chunk (2.1 GB, no more than 1.05 GB + the 1.05 GB accumulator).
TEST(Estimate, LmHeadChunkPlanIsTheKernelsRule) {
  const LmHeadChunkPlan gpt2 = lm_head_chunk_plan(16384, 50257, 768, 2, true, 0);
  EXPECT_EQ(gpt2.ld, 50304);
  EXPECT_EQ(gpt2.chunks, 2);
  EXPECT_EQ(gpt2.rows, 8192);
  EXPECT_TRUE(gpt2.f32_accumulator);
  EXPECT_EQ(gpt2.workspace_bytes(768, 2, 2, 50257), 8192LL * 50304 * 2 + 50304LL * 768 * 4 + 50304LL * 768 * 2);
  const LmHeadChunkPlan llama = lm_head_chunk_plan(8192, 128256, 2048, 2, true, 0);
  EXPECT_EQ(llama.chunks, 1);
  EXPECT_EQ(llama.rows, 8192);
  EXPECT_FALSE(llama.f32_accumulator);
  EXPECT_EQ(llama.workspace_bytes(2048, 2, 2, 128256), 8192LL * 128256 * 2);  // V % 64 == 0: no padded copy
  const LmHeadChunkPlan forced = lm_head_chunk_plan(1000, 512, 64, 4, false, 300);
  EXPECT_EQ(forced.rows, 300);
  EXPECT_EQ(forced.chunks, 4);
  EXPECT_FALSE(forced.f32_accumulator);  // an f32 dweight accumulates in place
}

// The counts DeepSpeed's formulas take come from the weights table and the HF names: the
// total equals the config's own count for every preset and bias / tie / GQA variant, and
// the largest module is the embedding, or (with a small vocabulary) a linear with its bias,
// as named_modules() holds it.
TEST(Estimate, ParameterCountsComeFromTheWeightsTable) {
  // The family-keyed count the table replaced: the embeddings, then GPT-2's Conv1D modules
  // or Llama's linears (without their MLP biases, which no preset has).
  const auto by_hand = [](const model::ModelConfig& c) {
    const int64_t C = c.hidden_size, F = c.intermediate_size, HD = c.num_heads * c.head_dim;
    const int64_t kv = c.num_kv_heads * c.head_dim;
    int64_t largest = c.vocab_size * C;
    if (c.position == model::PositionKind::Learned) largest = std::max(largest, c.max_position_embeddings * C);
    if (c.family == model::Family::GPT2)
      return std::max({largest, C * 3 * C + 3 * C, C * F + F, F * C + C});
    return std::max({largest, HD * C + (c.qkv_bias ? HD : 0), kv * C + (c.qkv_bias ? kv : 0), F * C, C * F});
  };
  for (const std::string& name : model::preset_names()) {
    SCOPED_TRACE(name);
    const model::ModelConfig c = model::preset_config(name);
    const HfParameterCounts n = hf_parameter_counts(c);
    EXPECT_EQ(n.total, c.num_parameters());
    EXPECT_EQ(n.largest_module, by_hand(c));
    EXPECT_EQ(largest_hf_layer_params(c), by_hand(c));
  }
  model::ModelConfig q = model::preset_config("tiny-llama");
  q.qkv_bias = true;  // Qwen2: biases on q/k/v only
  q.tie_word_embeddings = false;
  EXPECT_EQ(hf_parameter_counts(q).total, q.num_parameters());
  q.vocab_size = 8;  // the MLP's gate_proj / up_proj / down_proj are the largest modules now
  q.mlp_bias = true;
  q.attn_out_bias = true;
  EXPECT_EQ(hf_parameter_counts(q).total, q.num_parameters());
  EXPECT_EQ(hf_parameter_counts(q).largest_module, q.intermediate_size * q.hidden_size + q.intermediate_size);
  model::ModelConfig g = model::preset_config("gpt2");
  EXPECT_EQ(largest_hf_layer_params(g), g.vocab_size * g.hidden_size);
  g.vocab_size = 8;  // c_fc [C, F] with its bias
  EXPECT_EQ(largest_hf_layer_params(g), g.hidden_size * g.intermediate_size + g.intermediate_size);
}

// DeepSpeed 0.19's formulas on HF GPT-2 (124,439,808 parameters; the largest layer is wte,
// 50257 x 768 = 38,597,376): the numbers its estimate_*_all_live functions print.
TEST(Estimate, DeepSpeedFormulasGiveDeepSpeedsNumbers) {
  EstimateInput in;
  in.model = model::preset_config("gpt2");
  in.gpus_per_node = 8;
  in.stage = 2;
  MemoryEstimate e = estimate_memory(in);
  EXPECT_EQ(e.hf_parameters, 124439808);
  EXPECT_EQ(e.largest_layer_params, 38597376);
  EXPECT_EQ(e.deepspeed_gpu_bytes_per_gpu, 4 * 124439808LL + 16 * 124439808LL / 8);  // 746,638,848
  EXPECT_EQ(e.deepspeed_cpu_bytes_per_node, 5973110784LL);                           // P * 4 * 8 * 1.5
  in.offload_optimizer = config::OffloadDevice::CPU;
  e = estimate_memory(in);
  EXPECT_EQ(e.deepspeed_gpu_bytes_per_gpu, 2 * 124439808LL);
  EXPECT_EQ(e.deepspeed_cpu_bytes_per_node, 5973110784LL);  // P * max(4 * 8, 16) * 1.5
  in.stage = 3;
  in.offload_optimizer = config::OffloadDevice::None;
  e = estimate_memory(in);
  EXPECT_EQ(e.deepspeed_gpu_bytes_per_gpu, 4 * 38597376LL + 18 * 124439808LL / 8);  // 434,379,072
  EXPECT_EQ(e.deepspeed_cpu_bytes_per_node, 1852674048LL);                          // L * 4 * 8 * 1.5
  in.offload_optimizer = in.offload_param = config::OffloadDevice::CPU;
  in.nodes = 2;
  e = estimate_memory(in);
  EXPECT_EQ(e.deepspeed_gpu_bytes_per_gpu, 4 * 38597376LL);
  EXPECT_EQ(e.deepspeed_cpu_bytes_per_node, static_cast<int64_t>(124439808.0 * 18 * 0.5 * 1.5));
}

// The peaks `zerotrain train` reached on one GPU (B=8, T=1024, bf16; bench/NOTES.md, the
// one-call matrix): model state = the ZeRO line's, activations = peak - model state.
TEST(Estimate, GpuFiguresMatchTheMeasuredPeaks) {
  struct Measured {
    const char* preset;
    bool checkpointing;
    double peak_gib, activation_gib;
  };
  for (const Measured& m : {Measured{"gpt2-xl", false, 42.2, 19.0}, Measured{"gpt2-xl", true, 28.2, 5.0},
                            Measured{"llama-3.2-1b", false, 29.5, 11.1}, Measured{"llama-3.2-1b", true, 22.7, 4.3}}) {
    SCOPED_TRACE(std::string(m.preset) + (m.checkpointing ? " +AC" : ""));
    EstimateInput in;
    in.model = model::preset_config(m.preset);
    in.stage = 2;  // one GPU: runs as stage 0
    in.activation_checkpointing = m.checkpointing;
    const MemoryEstimate e = estimate_memory(in);
    EXPECT_EQ(e.effective_stage, 0);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    EXPECT_NEAR(e.gpu_model_states / gib, m.peak_gib - m.activation_gib, 0.01 * (m.peak_gib - m.activation_gib));
    EXPECT_NEAR(e.gpu_activations / gib, m.activation_gib, 0.10 * m.activation_gib);
    EXPECT_NEAR(e.gpu_bytes_per_gpu() / gib, m.peak_gib, 0.10 * m.peak_gib);
    EXPECT_EQ(e.cpu_bytes_per_node, 0);
  }
}

// Over several GPUs the engine's division shows, and offload moves state to the host.
TEST(Estimate, StagesDivideAndOffloadMovesStateToTheHost) {
  EstimateInput in;
  in.model = model::preset_config("llama-3.2-1b");
  in.gpus_per_node = 8;
  in.stage = 1;
  const MemoryEstimate s1 = estimate_memory(in);
  in.stage = 2;
  const MemoryEstimate s2 = estimate_memory(in);
  in.stage = 3;
  const MemoryEstimate s3 = estimate_memory(in);
  EXPECT_GT(s1.gpu_model_states, s2.gpu_model_states);
  EXPECT_GT(s2.gpu_model_states, s3.gpu_model_states);
  const int64_t P = s3.padded_elements;
  EXPECT_EQ(s3.gpu_model_states, P * (2 + 4 + 12) / 8);
  EXPECT_EQ(s3.gpu_transient, 3 * s3.largest_unit_elements * 2);
  // Optimizer offload: the state (12 bytes) and a staging copy of the f32 gradient slice
  // and the bf16 parameter slice (4 + 2) on the host; the GPU keeps parameters and gradients.
  in.offload_optimizer = config::OffloadDevice::CPU;
  const MemoryEstimate o3 = estimate_memory(in);
  EXPECT_EQ(o3.gpu_model_states, P * (2 + 4) / 8);
  EXPECT_EQ(o3.cpu_bytes_per_node, P * (12 + 4 + 2) / 8 * 8);
  // With parameter offload too the bf16 slices live on the host, where the host optimizer
  // updates them in place: no parameter staging.
  in.offload_param = config::OffloadDevice::CPU;
  const MemoryEstimate op = estimate_memory(in);
  EXPECT_EQ(op.gpu_model_states, P * 4 / 8);
  EXPECT_EQ(op.cpu_bytes_per_node, P * (2 + 12 + 4) / 8 * 8);
  // Optimizer state on NVMe: the drive holds the 12 bytes; the host 4 swap buffers of the
  // largest unit's slice and the same staging.
  in.offload_param = config::OffloadDevice::None;
  in.offload_optimizer = config::OffloadDevice::NVMe;
  const MemoryEstimate on = estimate_memory(in);
  EXPECT_EQ(on.gpu_model_states, o3.gpu_model_states);
  EXPECT_EQ(on.nvme_bytes_per_node, P * 12 / 8 * 8);
  EXPECT_EQ(on.cpu_bytes_per_node, (4 * ((on.largest_unit_elements + 7) / 8) * 12 + P * (4 + 2) / 8) * 8);
  EXPECT_LT(on.cpu_bytes_per_node, o3.cpu_bytes_per_node);
  EXPECT_EQ(o3.nvme_bytes_per_node, 0);
  // Parameters on NVMe (with the optimizer's state in host memory): within max_in_cpu
  // elements per rank they stay in host memory, as with cpu; past it the rest is on the
  // drive and the host holds buffer_count swap buffers of the largest unit's slice.
  in.offload_optimizer = config::OffloadDevice::CPU;
  in.offload_param = config::OffloadDevice::NVMe;
  const MemoryEstimate pn = estimate_memory(in);
  EXPECT_EQ(pn.gpu_model_states, op.gpu_model_states);
  EXPECT_EQ(pn.cpu_bytes_per_node, op.cpu_bytes_per_node);
  EXPECT_EQ(pn.nvme_bytes_per_node, 0);
  in.offload_param_max_in_cpu = 0;
  in.offload_param_buffer_count = 3;
  const MemoryEstimate ps = estimate_memory(in);
  EXPECT_EQ(ps.gpu_model_states, op.gpu_model_states);
  EXPECT_EQ(ps.nvme_bytes_per_node, P / 8 * 2 * 8);
  EXPECT_EQ(ps.cpu_bytes_per_node, (P * (12 + 4) / 8 + 3 * ((ps.largest_unit_elements + 7) / 8) * 2) * 8);
  in.offload_param_max_in_cpu = 1000000000;
  in.offload_param = config::OffloadDevice::CPU;
  // Parameter offload alone: the run keeps them on the GPU.
  in.offload_optimizer = config::OffloadDevice::None;
  EXPECT_EQ(estimate_memory(in).gpu_model_states, s3.gpu_model_states);
  in.offload_optimizer = config::OffloadDevice::CPU;
  in.stage = 2;
  EXPECT_THROW(estimate_memory(in), Error);  // offload_param needs stage 3
  in.offload_param = config::OffloadDevice::None;
  in.seq_len = 1 << 20;
  EXPECT_THROW(estimate_memory(in), Error);  // past the model's context
}

}  // namespace
}  // namespace zt::train
