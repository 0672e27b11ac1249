// The "no master weights" recipe (run config master_weights: false) end to end on CPU:
//  - a bf16 run without master weights trains, its checkpoints hold bf16 optimizer state
//    and no "<unit>.master" (and consolidate from the bf16 parameters), its memory plan reports a third of the master recipe's
//    optimizer state (m + v in bf16 = 4 bytes per parameter against master + m + v in f32
//    = 12), and a resumed run continues bitwise identically;
//  - checkpoints cross recipes both ways (master -> none rounds the state to bf16; none ->
//    master widens it and initialises the master from the parameters);
//  - `zerotrain train --master_weights false` without bf16 exits 2 naming the key;
//  - PyTorch oracle: ten AdamW steps on bf16 parameters and state against PyTorch's fused
//    AdamW "opmath" semantics emulated in torch (bf16 -> f32, the f32 update as ours,
//    f32 -> bf16 nearest even each step), within 1 bf16 ulp. (torch 1.13's own CPU AdamW on
//    bf16 tensors computes in bf16 arithmetic, which is not the semantics to match.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/oracle.h"
#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "ops/optimizer.h"
#include "checkpoint/consolidate.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("no_master_", name); }

using zt::testing::file_bytes;
using zt::testing::small_run;

// Runs the training with stderr captured (the log); returns the result and the log.
train::TrainResult run_logged(const config::TrainConfig& c, std::string& log) {
  ::testing::internal::CaptureStderr();
  train::TrainResult r;
  try {
    r = train::run_training(c);
  } catch (...) {
    log = ::testing::internal::GetCapturedStderr();
    std::fprintf(stderr, "%s", log.c_str());
    throw;
  }
  log = ::testing::internal::GetCapturedStderr();
  return r;
}

// Bytes of "optimizer state N KiB" in the memory plan line of a log.
double optimizer_state_bytes(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("optimizer state ([0-9.]+) (B|KiB|MiB|GiB)"))) return -1;
  const double v = std::stod(m[1]);
  const std::string u = m[2];
  return v * (u == "B" ? 1 : u == "KiB" ? 1024.0 : u == "MiB" ? 1048576.0 : 1073741824.0);
}

}  // namespace

TEST(NoMasterTraining, Bf16RunWithoutMasterResumesBitwiseWithBf16State) {
  const fs::path a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("master");
  std::string log_a, log_b, log_c;
  const train::TrainResult full = run_logged(small_run(a, {"--bf16", "true", "--master_weights", "false"}), log_a);
  ASSERT_EQ(full.steps, 6);
  for (double l : full.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(full.losses.back(), full.losses.front());

  // The checkpoint: bf16 parameters and bf16 moments, no master.
  const fs::path step3 = a / "run" / "checkpoints" / "global_step3";
  io::SafetensorsReader shard((step3 / "shard_rank0.safetensors").string());
  int moments = 0;
  for (const std::string& name : shard.names()) {
    EXPECT_EQ(name.find(".master"), std::string::npos) << name;
    if (name.find(".exp_avg") != std::string::npos) {
      EXPECT_EQ(shard.tensor(name).dtype(), DType::BF16) << name;
      ++moments;
    }
  }
  EXPECT_GT(moments, 0);
  // It consolidates from its bf16 parameters (there is no master to read).
  checkpoint::ConsolidateOptions co;
  co.dtype = DType::F32;
  const checkpoint::ConsolidateSummary cs = checkpoint::consolidate_checkpoint(step3.string(), (a / "hf").string(), co);
  EXPECT_EQ(cs.source, "params");
  EXPECT_TRUE(fs::exists(a / "hf" / "config.json"));

  // The memory plan: the master recipe holds three times the optimizer state.
  run_logged(small_run(c, {"--bf16", "true", "--max_steps", "1", "--save_interval", "0"}), log_c);
  const double none_bytes = optimizer_state_bytes(log_a), master_bytes = optimizer_state_bytes(log_c);
  ASSERT_GT(none_bytes, 0) << log_a;
  ASSERT_GT(master_bytes, 0) << log_c;
  EXPECT_NEAR(master_bytes / none_bytes, 3.0, 0.05) << "no master " << none_bytes << " B, master " << master_bytes;

  // Resumed from step 3: the same losses and the same final weights, bit for bit.
  const train::TrainResult resumed =
      run_logged(small_run(b, {"--bf16", "true", "--master_weights", "false", "--resume", step3.string()}), log_b);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(file_bytes(fs::path(full.final_model_dir) / "model.safetensors"),
            file_bytes(fs::path(resumed.final_model_dir) / "model.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(c);
}

TEST(NoMasterTraining, CheckpointsCrossRecipesBothWays) {
  const fs::path with = temp_dir("with"), without = temp_dir("without"), x = temp_dir("x"), y = temp_dir("y");
  std::string log;
  run_logged(small_run(with, {"--bf16", "true", "--max_steps", "3"}), log);
  run_logged(small_run(without, {"--bf16", "true", "--master_weights", "false", "--max_steps", "3"}), log);

  // master -> none: continues from the bf16 parameters, state rounded to bf16.
  const train::TrainResult r1 = run_logged(small_run(x, {"--bf16", "true", "--master_weights", "false", "--resume",
                                                         (with / "run" / "checkpoints" / "global_step3").string()}),
                                           log);
  EXPECT_NE(log.find("rounds the f32 optimizer state to bf16"), std::string::npos) << log;
  ASSERT_EQ(r1.losses.size(), 3u);
  for (double l : r1.losses) EXPECT_TRUE(std::isfinite(l));

  // none -> master: the master is initialised from the parameters.
  const train::TrainResult r2 = run_logged(
      small_run(y, {"--bf16", "true", "--resume", (without / "run" / "checkpoints" / "global_step3").string()}), log);
  EXPECT_NE(log.find("initialising them from its bf16 parameters"), std::string::npos) << log;
  ASSERT_EQ(r2.losses.size(), 3u);
  for (double l : r2.losses) EXPECT_TRUE(std::isfinite(l));
  // Its checkpoints have the master again, f32.
  io::SafetensorsReader shard((y / "run" / "checkpoints" / "global_step6" / "shard_rank0.safetensors").string());
  bool master = false;
  for (const std::string& name : shard.names())
    if (name.find(".master") != std::string::npos) {
      master = true;
      EXPECT_EQ(shard.tensor(name).dtype(), DType::F32) << name;
    }
  EXPECT_TRUE(master);
  for (const fs::path& p : {with, without, x, y}) fs::remove_all(p);
}

TEST(NoMasterTraining, CommandLineWithoutBf16ExitsTwoNamingTheKey) {
  const std::string exe = zt::testing::zerotrain_binary();
  if (!fs::exists(exe)) GTEST_SKIP() << "zerotrain executable not built";
  const fs::path a = temp_dir("cli");
  const auto r =
      zt::testing::sh("'" + exe + "' train --device cpu --max_steps 1 --master_weights false --output_dir '" +
                      (a / "run").string() + "'");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("master_weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  const auto f = zt::testing::sh("'" + exe +
                                 "' train --device cpu --max_steps 1 --fp16 true --master_weights false "
                                 "--output_dir '" +
                                 (a / "run").string() + "'");
  EXPECT_EQ(f.rc, 2) << f.out;
  EXPECT_NE(f.out.find("use bf16 or keep master weights"), std::string::npos) << f.out;
  fs::remove_all(a);
}

// --- PyTorch oracle ---------------------------------------------------------------------------

namespace {

// PyTorch's fused AdamW semantics on bf16 tensors (load p, m, v to f32, update in f32,
// store rounded), emulated with torch f32 ops in the order of our f32 update; scalars are
// the f32 values ours uses. Divisions are tensor by tensor (true IEEE division). Each step
// starts from our state before it: our CPU build contracts multiply-adds into FMAs (as
// nvcc does on the GPU, and PyTorch's CUDA kernel), the emulation does not, so a value on a
// bf16 rounding boundary may round the other way, and a whole trajectory would then
// drift; step by step every value must agree within 1 bf16 ulp (or, where the terms of m
// or p cancel to a far smaller result, within a few f32 ulp of those terms).
const char* kOracle = R"PY(
import json, math, sys
try:
    import numpy as np
    import torch
except Exception as e:
    print("torch unavailable:", e)
    sys.exit(3)
d = sys.argv[1]
cfg = json.load(open(d + "/cfg.json"))
f32 = np.float32
def load(name):
    a = np.fromfile(d + "/" + name + ".bin", dtype=np.int16)
    return torch.from_numpy(a).view(torch.bfloat16).float()
def save(name, t):
    t.bfloat16().view(torch.int16).numpy().tofile(d + "/" + name + ".bin")
b1, b2, eps = f32(cfg["beta1"]), f32(cfg["beta2"]), f32(cfg["eps"])
one_b1, one_b2 = float(f32(1) - b1), float(f32(1) - b2)
gs = float(f32(cfg["grad_scale"]))
# Each step from the state ours had before it (so one rounding difference does not carry).
for k in range(cfg["steps"]):
    p, m, v = load("p%d" % k), load("m%d" % k), load("v%d" % k)
    step = k + 1
    lr = cfg["lr"][k]
    bc1 = 1.0 - math.pow(float(b1), step)
    bc2 = 1.0 - math.pow(float(b2), step)
    step_size = float(f32(lr / bc1))
    bc2_sqrt = torch.full_like(p, float(f32(math.sqrt(bc2))))
    g = load("g%d" % k) * gs
    for off, length, wd in cfg["segments"]:
        s = slice(off, off + length)
        decay = float(f32(1.0 - lr * wd))
        ps = p[s] * decay
        ms = m[s] * float(b1) + g[s] * one_b1
        vs = v[s] * float(b2) + (g[s] * one_b2) * g[s]
        denom = torch.sqrt(vs) / bc2_sqrt[s] + float(eps)
        ps = ps - (ms / denom) * step_size
        # PyTorch stores the bf16 tensors rounded to nearest even.
        p[s] = ps.bfloat16().float(); m[s] = ms.bfloat16().float(); v[s] = vs.bfloat16().float()
    save("p_out%d" % k, p); save("m_out%d" % k, m); save("v_out%d" % k, v)
)PY";

void write_bits(const fs::path& path, const Tensor& t) {
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
}

std::vector<uint16_t> read_bits(const fs::path& path, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * 2));
  EXPECT_TRUE(in.good()) << path;
  return out;
}

int64_t ulps(uint16_t a, uint16_t b) {
  auto ord = [](uint16_t x) { return (x & 0x8000) ? -static_cast<int32_t>(x & 0x7fff) : static_cast<int32_t>(x); };
  return std::llabs(static_cast<long long>(ord(a)) - ord(b));
}

}  // namespace

TEST(NoMasterParity, TenAdamWStepsMatchPyTorchOpmathOnBf16) {
  const std::string why = zt::testing::torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  const fs::path dir = temp_dir("oracle");
  const int64_t n = 50000, steps = 10;
  const OptimizerSegments segs = {{0, 30000, 0.1f}, {30000, 19995, 0.0f}};  // the last 5 elements: a gap
  OwnedTensor p({n}, DType::BF16), m = OwnedTensor::zeros({n}, DType::BF16), v = OwnedTensor::zeros({n}, DType::BF16);
  fill_normal(p, Philox(21, 1), 0.0f, 1.0f);
  ops::AdamWHyper h;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.grad_scale = 0.5f;
  nlohmann::json cfg = {
      {"steps", steps}, {"beta1", h.beta1}, {"beta2", h.beta2}, {"eps", h.eps}, {"grad_scale", h.grad_scale}};
  cfg["segments"] = nlohmann::json::array();
  for (const OptimizerSegment& s : segs)
    cfg["segments"].push_back({s.offset, s.length, static_cast<double>(s.weight_decay)});
  cfg["lr"] = nlohmann::json::array();
  // Our state before each step, the gradient, and after each step (f32 copies for the
  // tolerances' term sizes).
  std::vector<std::vector<float>> p_before, m_before, g_scaled;
  std::vector<double> step_sizes;
  std::vector<std::vector<uint16_t>> p_after, m_after, v_after;
  auto bits = [](const Tensor& t) {
    std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
    std::memcpy(b.data(), t.data(), b.size() * 2);
    return b;
  };
  for (int64_t k = 0; k < steps; ++k) {
    const std::string ks = std::to_string(k);
    write_bits(dir / ("p" + ks + ".bin"), p);
    write_bits(dir / ("m" + ks + ".bin"), m);
    write_bits(dir / ("v" + ks + ".bin"), v);
    OwnedTensor g({n}, DType::BF16);
    fill_normal(g, Philox(22, static_cast<uint64_t>(k)), 0.0f, 1.0f);
    write_bits(dir / ("g" + ks + ".bin"), g);
    p_before.push_back(p->to_f32_vector());
    m_before.push_back(m->to_f32_vector());
    std::vector<float> gv = g->to_f32_vector();
    for (float& x : gv) x *= h.grad_scale;
    g_scaled.push_back(gv);
    h.lr = 1e-2f * static_cast<float>(k + 1) / static_cast<float>(steps);
    h.step = k + 1;
    cfg["lr"].push_back(static_cast<double>(h.lr));
    step_sizes.push_back(static_cast<double>(h.lr) / (1.0 - std::pow(static_cast<double>(h.beta1), k + 1.0)));
    ops::adamw_step_segments(p, Tensor(), g, m, v, h, segs);
    p_after.push_back(bits(p));
    m_after.push_back(bits(m));
    v_after.push_back(bits(v));
  }
  std::ofstream(dir / "cfg.json") << cfg.dump();
  std::ofstream(dir / "oracle.py") << kOracle;
  const std::string log = (dir / "oracle.log").string();
  const int rc = zt::testing::run_command("'" + std::string(ZT_PYTHON3) + "' '" + (dir / "oracle.py").string() + "' '" +
                                          dir.string() + "' > '" + log + "' 2>&1");
  if (rc == 3) GTEST_SKIP() << zt::testing::read_text(log);
  ASSERT_EQ(rc, 0) << zt::testing::read_text(log);
  constexpr double kF32 = 8.0 / 16777216.0;  // 8 ulp of f32, relative to the terms
  int64_t exact = 0, one_ulp = 0, cancelled = 0;
  for (int64_t k = 0; k < steps; ++k) {
    const std::string ks = std::to_string(k);
    const std::vector<float>&pb = p_before[static_cast<size_t>(k)], &mb = m_before[static_cast<size_t>(k)],
          &gk = g_scaled[static_cast<size_t>(k)];
    const double ss = step_sizes[static_cast<size_t>(k)];
    for (auto [name, got] :
         {std::make_pair("p", &p_after), std::make_pair("m", &m_after), std::make_pair("v", &v_after)}) {
      const std::vector<uint16_t> want = read_bits(dir / (std::string(name) + "_out" + ks + ".bin"), n);
      const std::vector<uint16_t>& ours = (*got)[static_cast<size_t>(k)];
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const int64_t d = ulps(ours[i], want[i]);
        if (d == 0) {
          ++exact;
          continue;
        }
        if (d == 1) {
          ++one_ulp;
          continue;
        }
        // Terms of the value: m = b1 m + (1-b1) g; p = p*decay - step_size*(m/denom), whose
        // second term is at most a few step sizes.
        const double m_terms = std::fabs(h.beta1 * mb[i]) + std::fabs((1.0 - h.beta1) * gk[i]);
        const double terms = name[0] == 'm' ? m_terms : name[0] == 'p' ? std::fabs(pb[i]) + 10 * ss : 0.0;
        const double w = to_f32(bf16{want[i]}), o = to_f32(bf16{ours[i]});
        ASSERT_LE(std::fabs(o - w), std::fabs(w) / 128.0 + kF32 * terms)
            << name << "[" << i << "] after step " << k + 1 << ": ours " << o << ", torch " << w << " (" << d
            << " ulp)";
        ++cancelled;
      }
    }
  }
  std::printf(
      "bf16 AdamW vs PyTorch opmath, %lld steps x 3 x %lld values: %lld equal, %lld 1 ulp apart, %lld more "
      "where terms cancel\n",
      static_cast<long long>(steps), static_cast<long long>(n), static_cast<long long>(exact),
      static_cast<long long>(one_ulp), static_cast<long long>(cancelled));
  EXPECT_LE(one_ulp + cancelled, 3 * n * steps / 500);
  EXPECT_LE(cancelled, 3 * n * steps / 10000);
  if (!HasFailure()) fs::remove_all(dir);
}
