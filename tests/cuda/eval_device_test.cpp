// `zerotrain eval --device cuda`: a HF directory loaded onto the GPU
// (model::load_for_inference with a CUDA device) scores documents like the CPU model,
// for GPT-2 and Llama (GQA, llama3 RoPE); generation on the GPU (the KV-cache engine with
// its CUDA kernels, `zerotrain generate --device cuda`) gives the CPU's logits (1e-4 of their
// range) at prefill and at every decode step, and the CPU's greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/hf_fixtures.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "model/hf_dir.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "model/transformer.h"
#include "train/evaluate.h"
#include "train/generate.h"

using namespace zt;

namespace {

std::vector<std::vector<int32_t>> documents(int64_t V) {
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> docs;
  for (int64_t n : {53, 7, 17, 40}) {
    std::vector<int32_t> d(static_cast<size_t>(n));
    for (auto& t : d) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    docs.push_back(d);
  }
  return docs;
}

void expect_gpu_eval_matches_cpu(model::ModelConfig config) {
  zt::testing::TempDir tmp(zt::testing::build_temp_path("cuda_eval_"));
  model::ModelOptions o;
  o.allocate_grads = false;
  model::Transformer m(config, o);
  m.init_weights(11);
  const std::string dir = tmp.file("model");
  model::save_pretrained(m, dir, DType::F32);

  train::EvalOptions eo;
  eo.seq_len = 16;
  eo.batch_size = 3;
  const auto docs = documents(config.vocab_size);
  model::InferenceModel cpu = model::load_for_inference(dir);
  model::InferenceModel gpu = model::load_for_inference(dir, DType::F32, Device::cuda());
  EXPECT_TRUE(gpu.model->options().device.is_cuda());
  const train::EvalResult a = train::evaluate(*cpu.model, docs, eo);
  const train::EvalResult b = train::evaluate(*gpu.model, docs, eo);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NEAR(b.mean_loss(), a.mean_loss(), 1e-5 * a.mean_loss()) << config.model_type;

  // Prefill of a 9-token prompt, then decode steps, on both devices; the cache crosses
  // the llama3 band edge (original context 64) when the run is long enough.
  std::vector<int32_t> prompt(9);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % config.vocab_size);
  model::InferenceEngine on_cpu(*cpu.model), on_gpu(*gpu.model);
  std::vector<int32_t> step = prompt;
  for (int s = 0; s < 80; ++s) {
    const std::vector<float> a_logits = on_cpu.forward(step);
    const std::vector<float> b_logits = on_gpu.forward(step);
    ASSERT_EQ(a_logits.size(), b_logits.size());
    float lo = a_logits[0], hi = a_logits[0], worst = 0.0f;
    for (size_t v = 0; v < a_logits.size(); ++v) {
      lo = std::min(lo, a_logits[v]);
      hi = std::max(hi, a_logits[v]);
      worst = std::max(worst, std::fabs(a_logits[v] - b_logits[v]));
    }
    ASSERT_LE(worst, 1e-4f * (hi - lo)) << config.model_type << " at position " << on_cpu.position();
    const int32_t next = static_cast<int32_t>(std::max_element(a_logits.begin(), a_logits.end()) - a_logits.begin());
    step.assign(1, next);
  }

  // Greedy generation through train::generate: the same tokens.
  train::GenerateOptions go;
  go.max_new_tokens = 24;
  go.sampling.decoding = train::Decoding::Greedy;
  model::InferenceEngine cpu_engine(*cpu.model), gpu_engine(*gpu.model);
  EXPECT_EQ(train::generate(gpu_engine, prompt, go).tokens, train::generate(cpu_engine, prompt, go).tokens)
      << config.model_type;
}

}  // namespace

TEST(EvalDevice, Gpt2OnTheGpuMatchesTheCpu) {
  ZT_REQUIRE_GPU();
  expect_gpu_eval_matches_cpu(model::preset_config("tiny-gpt2"));
}

TEST(EvalDevice, LlamaGqaLlama3OnTheGpuMatchesTheCpu) {
  ZT_REQUIRE_GPU();
  model::ModelConfig c = model::preset_config("tiny-llama");
  c.tie_word_embeddings = false;
  c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  c.rope.scaling.factor = 8.0f;
  c.rope.scaling.original_max_position_embeddings = 64;
  expect_gpu_eval_matches_cpu(c);
}

// The HF-made directories of tests/data/hf on the GPU: HF's prompt logits and greedy tokens.
TEST(GenerateDevice, HfMadeDirectoriesGiveHfsGreedyTokensOnTheGpu) {
  ZT_REQUIRE_GPU();
  for (const char* family : {"gpt2", "llama3", "qwen2", "llama2"})
    zt::testing::expect_matches_hf_fixture(family, Device::cuda());
}
