// Model parity with PyTorch: the C++ Transformer and tools/torch_reference.py (plain
// PyTorch with HF transformers' GPT2LMHeadModel / LlamaForCausalLM semantics, run in
// float64 as the oracle) get the same weights (written by save_hf_weights, read back by
// the script in HF names and layouts) and the same tokens/targets (some ignored). Loss,
// logits and every parameter gradient (mapped to HF layout with to_hf_layout) must agree.
//
// Two checks per tensor (logits, each gradient):
//  1. scaled error  max|ours - ref| / max|ref|  below kLogitsTol / kGradTol. (An
//     element-wise relative error with a floor of 1% of max|ref| is printed too; it is
//     ~1e-4 for any float32 implementation, PyTorch's own float32 run included, so it
//     cannot carry a 1e-4 tolerance.)
//  2. accuracy against PyTorch's float32 run of the same computation: our max abs error
//     at most kSlack times PyTorch's. A wrong formula anywhere (erf instead of tanh GELU,
//     a different eps, a RoPE variant) gives ratios of 100-10000.
// Skipped when python3 or torch is missing (CI installs python3-torch). On failure the
// inputs, the reference outputs and ours (ours.safetensors) stay in build/test_tmp/ (always
// with ZT_KEEP_TEST_FILES=1).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/oracle.h"
#include "model/hf_weights.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "common/perturb.h"
#include "model/transformer.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::model;

namespace {

constexpr double kLossTol = 1e-5;
constexpr double kLogitsTol = 1e-5;
constexpr double kGradTol = 1e-4;
constexpr double kFloor = 1e-2;
constexpr double kSlack = 4.0;

using zt::testing::read_text;
using zt::testing::run_command;
using zt::testing::torch_unavailable;

struct Err {
  double scaled = 0.0;               // max |ours - ref| / max |ref|
  double elementwise = 0.0;          // max |ours - ref| / max(|ref|, kFloor * max |ref|)
  double torch32_elementwise = 0.0;  // the same for PyTorch's own float32 run
  double max_abs = 0.0;              // max |ours - ref|
  double torch32_max_abs = 0.0;      // max |torch f32 - ref|
  double ref_max = 0.0;              // max |ref|
  // How much larger our error is than PyTorch's float32 error on the same computation.
  double ratio() const { return max_abs / std::max(torch32_max_abs, 1e-7 * ref_max + 1e-30); }
};

Err compare(const std::vector<double>& ours, const std::vector<double>& ref, const std::vector<double>& ref32) {
  Err e;
  for (double r : ref) e.ref_max = std::max(e.ref_max, std::fabs(r));
  const double floor = std::max(kFloor * e.ref_max, 1e-30);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(ours[i] - ref[i]);
    if (std::isnan(d)) return Err{INFINITY, INFINITY, 0.0, INFINITY, 0.0, e.ref_max};
    const double denom = std::max(std::fabs(ref[i]), floor);
    e.max_abs = std::max(e.max_abs, d);
    e.elementwise = std::max(e.elementwise, d / denom);
    e.torch32_elementwise = std::max(e.torch32_elementwise, std::fabs(ref32[i] - ref[i]) / denom);
    e.torch32_max_abs = std::max(e.torch32_max_abs, std::fabs(ref32[i] - ref[i]));
  }
  e.scaled = e.max_abs / std::max(e.ref_max, 1e-30);
  return e;
}

struct Case {
  std::string label;
  ModelConfig config;
  bool perturb = true;  // move weights off the init distribution (common/perturb.h)
  int64_t B = 2, T = 48;
};

using zt::testing::perturb;

void run_case(const Case& c) {
  const std::string why = torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << "PyTorch parity skipped: " << why;

  const fs::path dir =
      fs::path(ZT_BINARY_DIR) / "test_tmp" / ("torch_parity_" + std::to_string(::getpid()) + "_" + c.label);
  fs::remove_all(dir);
  fs::create_directories(dir);

  ModelOptions opts;
  Transformer m(c.config, opts);
  m.init_weights(1234);
  if (c.perturb) perturb(m, 99);
  m.set_mode(Mode::Eval);

  // Weights, config, batch.
  const std::string weights = (dir / "model.safetensors").string();
  model::save_hf_weights(m.registry(), c.config, weights, DType::F32);
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_to_hf_json(c.config).dump(2);
  }
  const int64_t B = c.B, T = c.T, N = B * T, V = c.config.vocab_size;
  std::vector<int32_t> tokens(N), targets(N);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % V);
    targets[i] = (rng() % 6 == 0) ? kIgnoreIndex : static_cast<int32_t>(rng() % V);
  }
  targets[1] = kIgnoreIndex;
  targets[N - 1] = static_cast<int32_t>(V - 1);  // the last real vocab row
  const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
  io::save_safetensors((dir / "batch.safetensors").string(), {{"tokens", tok}, {"targets", tgt}});

  // The oracle (float64), and the same computation in float32 for scale.
  const std::string out = (dir / "ref.safetensors").string();
  const std::string out32 = (dir / "ref32.safetensors").string();
  const std::string log = (dir / "ref.log").string();
  const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/torch_reference.py' --config '" +
                          (dir / "config.json").string() + "' --weights '" + weights + "' --batch '" +
                          (dir / "batch.safetensors").string() + "' --out '" + out + "' --also-float32 '" + out32 +
                          "' --dtype float64 > '" + log + "' 2>&1";
  const int rc = run_command(cmd);
  if (rc == 3) GTEST_SKIP() << "torch_reference.py: torch unavailable: " << read_text(log);
  ASSERT_EQ(rc, 0) << cmd << "\n" << read_text(log);

  // Ours: logits, then loss + gradients of the mean loss.
  OwnedTensor logits({B, T, V}, DType::F32);
  m.forward_logits(tok, logits);
  m.zero_grads();
  const int64_t count = count_targets(tgt);
  const ops::CrossEntropyResult res = m.forward_backward(tok, tgt, 1.0f / static_cast<float>(count));
  ASSERT_EQ(res.count, count);
  const double loss = res.loss_sum / static_cast<double>(res.count);

  io::SafetensorsReader ref(out), ref32(out32);
  auto read = [](const io::SafetensorsReader& r, const std::string& name) -> std::vector<double> {
    if (!r.contains(name)) {
      ADD_FAILURE() << r.path() << " has no " << name;
      return {};
    }
    const io::TensorInfo& info = r.info(name);
    const size_t n = static_cast<size_t>(shape_numel(info.shape));
    std::vector<double> v(n);
    if (info.dtype_name == "F64") {
      std::memcpy(v.data(), r.bytes(name), n * sizeof(double));
    } else {
      const std::vector<float> f = r.tensor(name).to_f32_vector();
      std::copy(f.begin(), f.end(), v.begin());
    }
    return v;
  };
  auto measure = [&](const std::string& name, const std::vector<float>& ours) {
    const std::vector<double> r64 = read(ref, name), r32 = read(ref32, name);
    std::vector<double> o(ours.begin(), ours.end());
    EXPECT_EQ(o.size(), r64.size()) << name;
    if (o.size() != r64.size() || r32.size() != r64.size()) return Err{INFINITY, INFINITY, 0.0, INFINITY, 0.0, 0.0};
    return compare(o, r64, r32);
  };

  const double ref_loss = read(ref, "loss").at(0);
  const double loss_err = std::fabs(loss - ref_loss) / std::fabs(ref_loss);
  const double torch32_loss_err = std::fabs(read(ref32, "loss").at(0) - ref_loss) / std::fabs(ref_loss);
  EXPECT_EQ(ref.info("logits").shape, (Shape{B, T, V}));
  const Err le = measure("logits", logits->to_f32_vector());
  std::printf(
      "[parity %s] loss %.9f (ref %.9f): rel err %.1e (torch f32 %.1e) | logits: scaled err %.1e, "
      "elementwise err %.1e (torch f32 %.1e), abs-error ratio to torch f32 %.2f, |ref| max %.2f\n",
      c.label.c_str(), loss, ref_loss, loss_err, torch32_loss_err, le.scaled, le.elementwise, le.torch32_elementwise,
      le.ratio(), le.ref_max);
  EXPECT_LT(loss_err, kLossTol) << c.label;
  EXPECT_LT(le.scaled, kLogitsTol) << c.label << " logits";
  EXPECT_LE(le.ratio(), kSlack) << c.label << " logits: max abs error " << le.max_abs << " vs torch f32 "
                                << le.torch32_max_abs;

  struct Row {
    std::string name;
    Err err;
  };
  std::vector<Row> rows;
  std::vector<OwnedTensor> grads;  // ours in HF layout, kept for ours.safetensors
  std::vector<std::pair<std::string, Tensor>> dump{{"logits", logits.view()}};
  m.registry().for_each([&](Unit&, ParamEntry& e) {
    const model::HfTensorLayout l = model::hf_layout(c.config, e.spec);
    grads.emplace_back(l.shape, DType::F32);
    const Tensor& g = grads.back();
    model::to_hf_layout(c.config, e.spec, e.grad, g);
    const std::string name = "grad." + l.name;
    if (ref.contains(name)) {
      EXPECT_EQ(ref.info(name).shape, l.shape) << name;
    }
    rows.push_back({l.name, measure(name, g.to_f32_vector())});
    dump.emplace_back(name, g);
  });
  // Our results next to the reference's, for a look when something differs.
  io::save_safetensors((dir / "ours.safetensors").string(), dump);
  size_t ref_grads = 0;
  for (const auto& n : ref.names()) ref_grads += n.rfind("grad.", 0) == 0;
  EXPECT_EQ(ref_grads, rows.size()) << "parameter sets differ";

  auto worst = [&](auto key) {
    return *std::max_element(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return key(a) < key(b); });
  };
  const Row ws = worst([](const Row& r) { return r.err.scaled; });
  const Row we = worst([](const Row& r) { return r.err.elementwise; });
  const Row wr = worst([](const Row& r) { return r.err.ratio(); });
  std::printf(
      "[parity %s] %zu grads: worst scaled err %.1e (%s); worst elementwise err %.1e (%s; torch f32 %.1e); "
      "worst abs-error ratio to torch f32 %.2f (%s)\n",
      c.label.c_str(), rows.size(), ws.err.scaled, ws.name.c_str(), we.err.elementwise, we.name.c_str(),
      we.err.torch32_elementwise, wr.err.ratio(), wr.name.c_str());
  for (const auto& r : rows) {
    EXPECT_LT(r.err.scaled, kGradTol) << c.label << " grad of " << r.name << " (|ref| max " << r.err.ref_max << ")";
    EXPECT_LE(r.err.ratio(), kSlack) << c.label << " grad of " << r.name << ": max abs error " << r.err.max_abs
                                     << " vs torch f32 " << r.err.torch32_max_abs;
  }
  if (!::testing::Test::HasFailure() && !std::getenv("ZT_KEEP_TEST_FILES")) fs::remove_all(dir);
}

ModelConfig llama_variant() {
  // Llama with attention_bias and mlp_bias (every projection has a bias), an untied head,
  // Llama-3 RoPE scaling, and a vocab that is not a multiple of 128 (padding rows).
  ModelConfig c = preset_config("tiny-llama");
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  c.tie_word_embeddings = false;
  c.vocab_size = 500;
  c.rope.theta = 500000.0f;
  c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  c.rope.scaling.factor = 8.0f;
  c.rope.scaling.low_freq_factor = 1.0f;
  c.rope.scaling.high_freq_factor = 4.0f;
  // Below max_position_embeddings (256), as transformers wants; wavelengths 32..128 are
  // then interpolated and longer ones divided by the factor.
  c.rope.scaling.original_max_position_embeddings = 128;
  c.validate("llama variant");
  return c;
}

ModelConfig qwen2_gqa_variant() {
  // Qwen2: q/k/v biases only; 8 query heads sharing 2 key/value heads, head_dim 32 (so
  // Hq * D = 256 != hidden 128), rope_theta 1e6, tied head.
  ModelConfig c = preset_config("tiny-llama");
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.attn_out_bias = c.mlp_bias = false;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rope.head_dim = 32;
  c.rope.theta = 1000000.0f;
  c.norm_eps = 1e-6f;
  c.validate("qwen2 gqa variant");
  return c;
}

ModelConfig gpt2_variant() {
  ModelConfig c = preset_config("tiny-gpt2");
  c.vocab_size = 300;  // padded to 384
  c.tie_word_embeddings = false;
  c.validate("gpt2 variant");
  return c;
}

}  // namespace

TEST(TorchParity, ReferenceSelfTest) {
  const std::string why = torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << "PyTorch parity skipped: " << why;
  const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/torch_reference.py' --self-test";
  EXPECT_EQ(run_command(cmd), 0) << cmd;
}

TEST(TorchParity, TinyGpt2AtInit) { run_case({"tiny-gpt2-init", preset_config("tiny-gpt2"), false}); }
TEST(TorchParity, TinyGpt2) { run_case({"tiny-gpt2", preset_config("tiny-gpt2")}); }
TEST(TorchParity, Gpt2UntiedPaddedVocab) { run_case({"gpt2-untied", gpt2_variant()}); }
TEST(TorchParity, TinyLlamaAtInit) { run_case({"tiny-llama-init", preset_config("tiny-llama"), false}); }
TEST(TorchParity, TinyLlama) { run_case({"tiny-llama", preset_config("tiny-llama")}); }
TEST(TorchParity, LlamaUntiedBiasesLlama3Rope) { run_case({"llama-biases-llama3-rope", llama_variant()}); }
TEST(TorchParity, Qwen2GqaWideHeads) { run_case({"qwen2-gqa", qwen2_gqa_variant()}); }
