// Optimizer parity with PyTorch: the same initial parameters and ten gradients (some
// parameters in the no-decay group, a varying lr, a grad_scale as after loss unscaling)
// go through our optimizers and through tools/optimizer_oracle.py (torch.optim.AdamW,
// torch.optim.Adam with L2 weight decay = DeepSpeed adam_w_mode false, torch.optim.SGD,
// and Lion by its published update), exchanged as safetensors files. Final parameters
// must agree within kRelTol. For bf16 parameters the oracle runs in f32 from the same
// bf16 values and gradients, which is what our f32 master must match; the bf16 parameter
// must be the master rounded.
//
// Skipped when python3 or torch is
// missing. Files stay in build/test_tmp/ on failure (always with ZT_KEEP_TEST_FILES=1).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/oracle.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "model/registry.h"
#include "zero/optimizer.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::zero;

namespace {

constexpr int kSteps = 10;
// 1. Against PyTorch's float32 run: |ours - torch| <= kRelTol * max(|torch|, 1).
//    Parameters start O(1) (N(0, 1)) and SGD moves them by O(0.1) per step, so a value
//    ending near zero carries the f32 rounding of those O(1) terms (1 ulp of 1 = 1.2e-7
//    per operation), not of its own size; hence the floor of 1. Betas held as float
//    (0.9f, not 0.9) add ~1e-8.
constexpr double kRelTol = 1e-6;
// 2. Against the float64 run: our max abs error per tensor at most kSlack times
//    PyTorch's float32 error (plus kAbsFloor). A wrong formula gives errors of lr-size,
//    1e3-1e6 times more.
constexpr double kSlack = 4.0;
constexpr double kAbsFloor = 1e-9;

struct Case {
  std::string name;
  OptimizerSpec spec;
  DType dtype;
  float grad_scale;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  OptimizerSpec adamw;
  adamw.type = OptimizerType::AdamW;
  adamw.lr = 1e-2f;
  adamw.weight_decay = 0.1f;
  out.push_back({"adamw", adamw, DType::F32, 0.5f});
  OptimizerSpec adam_l2 = adamw;
  adam_l2.type = OptimizerType::Adam;
  adam_l2.adam_w_mode = false;
  out.push_back({"adam_l2", adam_l2, DType::F32, 0.5f});
  OptimizerSpec sgd;
  sgd.type = OptimizerType::SGD;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01f;
  out.push_back({"sgd_nesterov", sgd, DType::F32, 0.25f});
  OptimizerSpec sgd_damp = sgd;
  sgd_damp.nesterov = false;
  sgd_damp.momentum = 0.8f;
  sgd_damp.dampening = 0.3f;
  out.push_back({"sgd_dampening", sgd_damp, DType::F32, 1.0f});
  OptimizerSpec lion;
  lion.type = OptimizerType::Lion;
  lion.lr = 1e-3f;
  lion.beta2 = 0.99f;
  lion.weight_decay = 0.5f;
  out.push_back({"lion", lion, DType::F32, 2.0f});
  out.push_back({"adamw_bf16", adamw, DType::BF16, 0.5f});
  out.push_back({"lion_bf16", lion, DType::BF16, 1.0f});
  out.push_back({"sgd_bf16", sgd, DType::BF16, 1.0f});
  return out;
}

float lr_at(const OptimizerSpec& s, int k) { return s.lr * static_cast<float>(k + 1) / static_cast<float>(kSteps); }

// Two units: a decayed matrix and a no-decay bias; a decayed vector long enough for the
// kernels' parallel path and a no-decay norm gain.
model::ParameterRegistry make_registry(DType dtype) {
  auto spec = [](const char* name, Shape shape, model::WeightDecay decay) {
    model::ParamSpec s;
    s.name = name;
    s.shape = std::move(shape);
    s.decay = decay;
    return s;
  };
  model::ParameterRegistry reg;
  reg.add_unit("embed", {spec("w", {16, 12}, model::WeightDecay::Apply), spec("b", {12}, model::WeightDecay::Skip)}, 2);
  reg.add_unit("block.0",
               {spec("big", {33000}, model::WeightDecay::Apply), spec("gain", {9}, model::WeightDecay::Skip)}, 1);
  uint64_t stream = 0;
  for (auto& u : reg.units()) {
    u->allocate_params(dtype, Device::cpu());
    u->allocate_grads(dtype, Device::cpu());
    for (auto& p : u->params()) fill_normal(p.value, Philox(11, ++stream), 0.0f, 1.0f);
  }
  return reg;
}

nlohmann::json config_json(const Case& c, model::ParameterRegistry& reg) {
  const OptimizerSpec& s = c.spec;
  nlohmann::json j;
  const char* type = optimizer_type_name(s.type);
  j["type"] = type;
  // Hyper-parameters as a user writes them (0.9, not float 0.9's double expansion).
  auto nice = [](float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
    return std::stod(buf);
  };
  j["beta1"] = nice(s.beta1);
  j["beta2"] = nice(s.beta2);
  j["eps"] = nice(s.eps);
  j["weight_decay"] = nice(s.weight_decay);
  j["adam_w_mode"] = s.adam_w_mode;
  j["momentum"] = nice(s.momentum);
  j["dampening"] = nice(s.dampening);
  j["nesterov"] = s.nesterov;
  j["grad_scale"] = nice(c.grad_scale);
  nlohmann::json lrs = nlohmann::json::array();
  for (int k = 0; k < kSteps; ++k) lrs.push_back(nice(lr_at(s, k)));
  j["lr"] = lrs;
  nlohmann::json no_decay = nlohmann::json::array();
  reg.for_each([&](model::Unit&, model::ParamEntry& p) {
    if (p.spec.decay == model::WeightDecay::Skip) no_decay.push_back(p.name());
  });
  j["no_decay"] = no_decay;
  return j;
}

using zt::testing::read_text;
using zt::testing::run_command;

// Writes DIR/<case>.in.safetensors for every case: the initial parameters and every
// step's gradients (drawn in the gradient dtype), with the config as metadata.
void write_inputs(const fs::path& dir) {
  for (const Case& c : cases()) {
    model::ParameterRegistry reg = make_registry(c.dtype);
    std::vector<std::pair<std::string, Tensor>> out;
    std::vector<OwnedTensor> keep;
    reg.for_each([&](model::Unit&, model::ParamEntry& p) { out.emplace_back("p." + p.name(), p.value); });
    uint64_t stream = 0;
    for (int k = 0; k < kSteps; ++k)
      reg.for_each([&](model::Unit&, model::ParamEntry& p) {
        keep.emplace_back(p.spec.shape, c.dtype);
        fill_normal(keep.back(), Philox(100 + static_cast<uint64_t>(k), ++stream), 0.0f, 1.0f);
        out.emplace_back("g" + std::to_string(k) + "." + p.name(), keep.back().view());
      });
    io::save_safetensors((dir / (c.name + ".in.safetensors")).string(), out, {{"config", config_json(c, reg).dump()}});
  }
}

// Runs our optimizer over the case's inputs and checks the result against the oracle's.
void check_case(const Case& c, const fs::path& dir) {
  SCOPED_TRACE(c.name);
  model::ParameterRegistry reg = make_registry(c.dtype);
  io::SafetensorsReader in((dir / (c.name + ".in.safetensors")).string());
  io::SafetensorsReader ref((dir / (c.name + ".out.safetensors")).string());
  auto opt = make_optimizer(reg, c.spec);
  for (int k = 0; k < kSteps; ++k) {
    reg.for_each([&](model::Unit&, model::ParamEntry& p) {
      p.grad.copy_from(in.tensor("g" + std::to_string(k) + "." + p.name()));
    });
    opt->step(lr_at(c.spec, k), c.grad_scale);
  }
  // 16-bit parameters: compare the f32 master (and check the parameter is it, rounded).
  std::map<std::string, Tensor> master;
  for (auto& [name, t] : opt->state_tensors())
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".master") == 0)
      master[name.substr(0, name.size() - 7)] = t;
  double worst = 0.0, worst_ratio = 0.0;
  for (auto& u : reg.units()) {
    for (auto& p : u->params()) {
      const Tensor r = ref.tensor("p." + p.name());
      Tensor ours = p.value;
      if (c.dtype != DType::F32) {
        ASSERT_TRUE(master.count(u->name())) << "no master for unit " << u->name();
        ours = master[u->name()].narrow(0, p.offset, p.numel());
        for (int64_t i = 0; i < p.numel(); ++i)
          ASSERT_EQ(p.value.get_f32(i), to_f32(to_bf16(ours.get_f32(i)))) << p.name() << "[" << i << "]";
      }
      const Tensor hi = ref.tensor("hi." + p.name()), lo = ref.tensor("lo." + p.name());
      // Lion's update is lr * sign(c): where c was within rounding of zero at some step (the
      // oracle counts those steps per element), either sign is right, and the results may
      // differ by 2 lr per such step. Those elements are held to that bound alone.
      const std::string tie_name = "tie." + p.name();
      const bool has_ties = ref.contains(tie_name);
      const Tensor ties = has_ties ? ref.tensor(tie_name) : Tensor();
      double max_lr = 0.0;
      for (int k = 0; k < kSteps; ++k) max_lr = std::max(max_lr, static_cast<double>(lr_at(c.spec, k)));
      double ours_err = 0.0, torch_err = 0.0;
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double want = r.get_f32(i), got = ours.get_f32(i);
        if (has_ties && ties.get_f32(i) > 0) {
          ASSERT_LE(std::fabs(got - want), 2.0 * max_lr * ties.get_f32(i) * (1.0 + 1e-3) + kRelTol)
              << p.name() << "[" << i << "] ours " << got << " torch " << want << " (" << ties.get_f32(i)
              << " tied signs)";
          continue;
        }
        const double err = std::fabs(got - want) / std::max(std::fabs(want), 1.0);
        worst = std::max(worst, err);
        ASSERT_LE(err, kRelTol) << p.name() << "[" << i << "] ours " << got << " torch " << want;
        const double exact = static_cast<double>(hi.get_f32(i)) + static_cast<double>(lo.get_f32(i));
        ours_err = std::max(ours_err, std::fabs(got - exact));
        torch_err = std::max(torch_err, std::fabs(want - exact));
      }
      EXPECT_LE(ours_err, kSlack * torch_err + kAbsFloor)
          << p.name() << ": our max error against float64 " << ours_err << ", PyTorch float32's " << torch_err;
      worst_ratio = std::max(worst_ratio, ours_err / (torch_err + kAbsFloor));
    }
  }
  std::printf("%-14s max relative error to torch f32 %.3g; error to float64 at most %.2f x torch f32's\n",
              c.name.c_str(), worst, worst_ratio);
}

}  // namespace

// One test for all cases: a single oracle run (PyTorch's import dominates the time).
TEST(OptimizerParity, TenStepsOfEveryOptimizerMatchPyTorch) {
  const std::string py = ZT_PYTHON3;
  if (py.empty() || py.find("NOTFOUND") != std::string::npos) GTEST_SKIP() << "python3 was not found at configure time";
  const fs::path dir = fs::path(ZT_BINARY_DIR) / "test_tmp" / ("optimizer_parity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_inputs(dir);
  std::string names;
  for (const Case& c : cases()) names += " " + c.name;
  const std::string log = (dir / "oracle.log").string();
  const int rc = run_command("'" + py + "' '" + ZT_TOOLS_DIR + "/optimizer_oracle.py' '" + dir.string() + "'" + names +
                             " > '" + log + "' 2>&1");
  if (rc == 3) {
    fs::remove_all(dir);
    GTEST_SKIP() << "optimizer parity skipped: torch unavailable: " << read_text(log);
  }
  ASSERT_EQ(rc, 0) << "optimizer_oracle.py failed: " << read_text(log);
  for (const Case& c : cases()) check_case(c, dir);
  const char* keep = std::getenv("ZT_KEEP_TEST_FILES");
  if (!HasFailure() && !(keep && *keep == '1')) fs::remove_all(dir);
}
