// `zerotrain eval --device cuda`: a HF directory loaded onto the GPU
// (model::load_for_inference with a CUDA device) scores documents like the CPU model,
// for GPT-2 and Llama (GQA, llama3 RoPE); generation on the GPU is refused with an error
// naming the missing KV-cache kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "model/hf_dir.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "model/transformer.h"
#include "train/evaluate.h"

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

  try {
    model::InferenceEngine engine(*gpu.model);
    ADD_FAILURE() << "generation on the GPU was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("decode_attention_forward"), std::string::npos) << e.what();
  }
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
