// The model on the GPU against PyTorch (tools/torch_reference.py: plain PyTorch with HF
// GPT2LMHeadModel / LlamaForCausalLM semantics, float32 on the host), from the same
// safetensors weights and tokens: GPT-2 124M and a Llama shape with GQA, in bf16
// (parameters, gradients and activations, as a bf16 GPU run trains) and in f32. Loss and
// every parameter gradient, as max|ours - ref| / max|ref| per tensor:
//   f32:  loss 1e-5, gradients 1e-3 (cuBLASLt and flash attention sum in another order)
//   bf16: loss 1e-2, gradients 5e-2 (bf16 rounding of activations and gradients)
// Skipped without a GPU or without torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cuda_tensor.h"
#include "common/oracle.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/transformer.h"
#include "ops/copy.h"

namespace fs = std::filesystem;
using namespace zt;

namespace {

struct Case {
  std::string label;
  model::ModelConfig config;
  DType dtype;
  double loss_tol, grad_tol;
};

model::ModelConfig llama_shape() {
  // Llama-3.2-1B's layer shape (hidden 2048, 32 heads, 8 kv heads, ffn 8192) with 2 layers
  // and a 32K vocabulary, so the float32 reference stays quick on the host.
  model::ModelConfig c = model::preset_config("llama-3.2-1b");
  c.num_layers = 2;
  c.vocab_size = 32000;
  return c;
}

void run_case(const Case& c) {
  ZT_REQUIRE_GPU();
  const std::string why = zt::testing::torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  const fs::path dir =
      fs::path(ZT_BINARY_DIR) / "test_tmp" / ("torch_gpu_" + std::to_string(::getpid()) + "_" + c.label);
  fs::remove_all(dir);
  fs::create_directories(dir);

  model::ModelConfig config = c.config;
  config.embd_pdrop = config.resid_pdrop = config.attn_pdrop = 0.0f;
  // Weights drawn once in f32 and written in the case's dtype, so PyTorch and we start from
  // the same (rounded) values.
  model::ModelOptions host_o;
  host_o.allocate_grads = false;
  model::Transformer host(config, host_o);
  host.init_weights(1234);
  const std::string weights = (dir / "model.safetensors").string();
  model::save_hf_weights(host.registry(), config, weights, c.dtype);
  std::ofstream(dir / "config.json") << model::config_to_hf_json(config).dump(2);

  model::ModelOptions o;
  o.device = Device::cuda();
  o.param_dtype = o.grad_dtype = o.activation_dtype = c.dtype;
  model::Transformer gpu(config, o);
  model::load_hf_weights(host.registry(), config, weights);  // the rounded values, back in f32
  for (size_t i = 0; i < gpu.registry().size(); ++i)
    ops::copy(gpu.registry().unit(i).flat_params(), host.registry().unit(i).flat_params());

  const int64_t B = 2, T = 128, N = B * T, V = config.vocab_size;
  std::vector<int32_t> tokens(N), targets(N);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % V);
    targets[i] = (rng() % 9 == 0) ? model::kIgnoreIndex : static_cast<int32_t>(rng() % V);
  }
  const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
  io::save_safetensors((dir / "batch.safetensors").string(), {{"tokens", tok}, {"targets", tgt}});
  const std::string out = (dir / "ref.safetensors").string(), log = (dir / "ref.log").string();
  const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/torch_reference.py' --config '" +
                          (dir / "config.json").string() + "' --weights '" + weights + "' --batch '" +
                          (dir / "batch.safetensors").string() + "' --out '" + out + "' --dtype float32 > '" + log +
                          "' 2>&1";
  const int rc = zt::testing::run_command(cmd);
  if (rc == 3) GTEST_SKIP() << "torch_reference.py: torch unavailable: " << zt::testing::read_text(log);
  ASSERT_EQ(rc, 0) << cmd << "\n" << zt::testing::read_text(log);

  const int64_t count = model::count_targets(tgt);
  const auto r = gpu.forward_backward(tok, tgt, 1.0f / static_cast<float>(count));
  const double loss = r.loss_sum / static_cast<double>(r.count);
  io::SafetensorsReader ref(out);
  const double ref_loss = ref.tensor("loss").to_f32_vector().at(0);
  const double loss_err = std::fabs(loss - ref_loss) / std::fabs(ref_loss);
  EXPECT_LE(loss_err, c.loss_tol) << c.label;

  double worst = 0;
  std::string worst_name;
  gpu.registry().for_each([&](model::Unit&, model::ParamEntry& e) {
    const model::HfTensorLayout l = model::hf_layout(config, e.spec);
    OwnedTensor ours(l.shape, DType::F32);
    model::to_hf_layout(config, e.spec, e.grad, ours);
    const std::string name = "grad." + l.name;
    ASSERT_TRUE(ref.contains(name)) << name;
    const std::vector<float> a = ours->to_f32_vector(), b = ref.tensor(name).to_f32_vector();
    ASSERT_EQ(a.size(), b.size()) << name;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::isfinite(a[i]) ? std::fabs(static_cast<double>(a[i]) - b[i]) : INFINITY);
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    }
    const double err = diff / std::max(scale, 1e-30);
    EXPECT_LE(err, c.grad_tol) << c.label << " " << name;
    if (err > worst) worst = err, worst_name = name;
  });
  std::printf("[gpu-vs-torch %s] loss %.6f (torch %.6f, rel %.1e); worst gradient %s rel %.1e\n", c.label.c_str(), loss,
              ref_loss, loss_err, worst_name.c_str(), worst);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(CudaTorchParity, Gpt2_124M_F32) { run_case({"gpt2_f32", model::preset_config("gpt2"), DType::F32, 1e-5, 1e-3}); }
TEST(CudaTorchParity, Gpt2_124M_Bf16) {
  run_case({"gpt2_bf16", model::preset_config("gpt2"), DType::BF16, 1e-2, 5e-2});
}
TEST(CudaTorchParity, LlamaShapeGqa_F32) { run_case({"llama_f32", llama_shape(), DType::F32, 1e-5, 1e-3}); }
TEST(CudaTorchParity, LlamaShapeGqa_Bf16) { run_case({"llama_bf16", llama_shape(), DType::BF16, 1e-2, 5e-2}); }

}  // namespace
