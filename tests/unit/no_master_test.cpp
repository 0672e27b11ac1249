// The "no master weights" recipe (OptimizerSpec::master_weights = MasterWeights::None):
// bf16 parameters updated in place with bf16 optimizer state, as PyTorch's fused AdamW
// on a .to(torch.bfloat16) model ("opmath": load p, m, v as f32, update in f32, store
// rounded to nearest even).
//  - Kernels (ops layer, CPU): AdamW against a double-precision transcription of the same
//    semantics, step by step from the kernel's own state, within 1 bf16 ulp, with weight
//    decay on and off per segment and gaps left untouched; AdamW, SGD and Lion equal the
//    f32-state path on the widened values, rounded, bit for bit; refused combinations.
//  - FlatOptimizer: no ".master", bf16 state, state_bytes 4 instead of 12 bytes per
//    element for Adam; partitions and resume bitwise; fp16 + no master refused.
//  - Checkpoints: f32 state + master loaded into a no-master optimizer (state rounded to
//    bf16) and bf16 state without master into a master optimizer (widened exactly, master
//    initialised from the parameters).
//  - The run config's master_weights: default true, false carried into the spec, refused
//    (exit code 2, naming the key) without bf16.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/optimizer.h"
#include "checkpoint/checkpoint.h"
#include "config/config_dump.h"
#include "config/run_config.h"
#include "zero/optimizer.h"
#include "zero/partition.h"

using namespace zt;
using namespace zt::zero;
namespace fs = std::filesystem;

namespace {

// Distance in bf16 steps between two finite bf16 values (0: equal bits, or +0 / -0).
int64_t ulp_distance(bf16 a, bf16 b) {
  auto ordered = [](bf16 x) {
    const int32_t bits = x.bits;
    return (bits & 0x8000) ? -(bits & 0x7fff) : bits;
  };
  return std::llabs(static_cast<long long>(ordered(a)) - ordered(b));
}

bf16 round_bf16(double x) { return to_bf16(static_cast<float>(x)); }

std::vector<bf16> bf16_values(const Tensor& t) {
  std::vector<bf16> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data(), out.size() * sizeof(bf16));
  return out;
}

OwnedTensor random_tensor(int64_t n, DType dt, uint64_t seed, uint64_t stream, float stddev) {
  OwnedTensor t({n}, dt);
  fill_normal(t, Philox(seed, stream), 0.0f, stddev);
  return t;
}

// v must be non-negative: squares of noise.
OwnedTensor random_v(int64_t n, uint64_t seed) {
  OwnedTensor f = random_tensor(n, DType::F32, seed, 99, 1e-2f);
  OwnedTensor v({n}, DType::BF16);
  for (int64_t i = 0; i < n; ++i) v->set_f32(i, f->get_f32(i) * f->get_f32(i));
  return v;
}

// f32 copy of a tensor (bf16 widens exactly).
OwnedTensor widen(const Tensor& t) {
  OwnedTensor out(t.shape(), DType::F32);
  out->copy_from(t);
  return out;
}

}  // namespace

// --- kernels ---------------------------------------------------------------------------

TEST(NoMasterKernel, AdamWMatchesDoubleOpmathReferenceWithinOneUlp) {
  const int64_t n = 3000;
  // Decay on, off, on, with a gap of 5 elements after the first segment (left untouched).
  const OptimizerSegments segs = {{0, 1000, 0.1f}, {1005, 995, 0.0f}, {2000, 1000, 0.3f}};
  for (DType gdt : {DType::BF16, DType::F32}) {
    for (AdamDecay decay : {AdamDecay::Decoupled, AdamDecay::L2}) {
      SCOPED_TRACE(std::string("grad ") + dtype_name(gdt) + (decay == AdamDecay::L2 ? " L2" : " decoupled"));
      OwnedTensor p = random_tensor(n, DType::BF16, 1, 1, 1.0f);
      OwnedTensor m = random_tensor(n, DType::BF16, 1, 2, 1e-2f);
      OwnedTensor v = random_v(n, 1);
      const std::vector<bf16> p_init = bf16_values(p);
      ops::AdamWHyper h;
      h.lr = 1e-2f;
      h.beta1 = 0.9f;
      h.beta2 = 0.95f;
      h.eps = 1e-8f;
      h.decay = decay;
      h.grad_scale = 0.5f;
      int64_t off_by_one = 0, cancelled = 0;
      for (int64_t step = 1; step <= 6; ++step) {
        h.step = step;
        const OwnedTensor g = random_tensor(n, gdt, 2, static_cast<uint64_t>(step), 1.0f);
        const std::vector<bf16> p0 = bf16_values(p), m0 = bf16_values(m), v0 = bf16_values(v);
        ops::adamw_step_segments(p, Tensor(), g, m, v, h, segs);
        const std::vector<bf16> p1 = bf16_values(p), m1 = bf16_values(m), v1 = bf16_values(v);
        const double bc1 = 1 - std::pow(static_cast<double>(h.beta1), static_cast<double>(step));
        const double bc2 = 1 - std::pow(static_cast<double>(h.beta2), static_cast<double>(step));
        for (const OptimizerSegment& s : segs) {
          for (int64_t i = s.offset; i < s.offset + s.length; ++i) {
            const size_t k = static_cast<size_t>(i);
            double pi = to_f32(p0[k]), mi = to_f32(m0[k]), vi = to_f32(v0[k]);
            double gi = static_cast<double>(g->get_f32(i)) * h.grad_scale;
            // Sizes of the terms each result sums: where they cancel, the f32 arithmetic's
            // rounding (a few ulp of the terms) can exceed 1 bf16 ulp of the small result.
            double g_terms = std::fabs(gi), p_terms = std::fabs(pi);
            if (decay == AdamDecay::L2) {
              gi += static_cast<double>(s.weight_decay) * pi;
              g_terms += std::fabs(static_cast<double>(s.weight_decay) * pi);
            } else {
              pi *= 1 - static_cast<double>(h.lr) * s.weight_decay;
            }
            const double m_terms = std::fabs(h.beta1 * mi) + (1 - static_cast<double>(h.beta1)) * g_terms;
            mi = h.beta1 * mi + (1 - static_cast<double>(h.beta1)) * gi;
            vi = h.beta2 * vi + (1 - static_cast<double>(h.beta2)) * gi * gi;
            const double upd = (h.lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + h.eps);
            pi -= upd;
            p_terms += std::fabs(upd);
            constexpr double kF32 = 8.0 / 16777216.0;  // 8 ulp of f32, relative
            auto ok = [](bf16 got, double want, double terms, int64_t& d) {
              d = ulp_distance(got, round_bf16(want));
              return d <= 1 || std::fabs(static_cast<double>(to_f32(got)) - want) <=
                                   std::fabs(want) / 256.0 + kF32 * (terms + 2 * kF32 * terms);
            };
            int64_t dp = 0, dm = 0, dv = 0;
            ASSERT_TRUE(ok(p1[k], pi, p_terms + m_terms, dp))
                << "p[" << i << "] step " << step << ": " << to_f32(p1[k]) << " vs " << pi;
            ASSERT_TRUE(ok(m1[k], mi, m_terms, dm))
                << "m[" << i << "] step " << step << ": " << to_f32(m1[k]) << " vs " << mi;
            ASSERT_TRUE(ok(v1[k], vi, vi, dv))
                << "v[" << i << "] step " << step << ": " << to_f32(v1[k]) << " vs " << vi;
            ASSERT_LE(dv, 1) << "v[" << i << "] step " << step;
            off_by_one += (dp + dm + dv) != 0;
            cancelled += dp > 1 || dm > 1;
          }
        }
        // The gap is never touched.
        for (int64_t i = 1000; i < 1005; ++i) {
          ASSERT_EQ(p1[static_cast<size_t>(i)].bits, p_init[static_cast<size_t>(i)].bits) << i;
          ASSERT_EQ(m1[static_cast<size_t>(i)].bits, m0[static_cast<size_t>(i)].bits) << i;
        }
      }
      // Nearly all elements round exactly as the double reference (the rest sit on a
      // rounding boundary within f32 error).
      EXPECT_LE(off_by_one, 6 * n / 500) << off_by_one << " elements 1 ulp off";
      // More than 1 ulp only where terms cancel to a far smaller result (m near 0).
      EXPECT_LE(cancelled, n / 500) << cancelled << " elements off by more than 1 ulp";
      std::printf("grad %s %s: %lld of %lld element-steps off by 1 ulp, %lld more (cancellation)\n", dtype_name(gdt),
                  decay == AdamDecay::L2 ? "L2" : "decoupled", static_cast<long long>(off_by_one),
                  static_cast<long long>(6 * (n - 5)), static_cast<long long>(cancelled));
    }
  }
}

TEST(NoMasterKernel, AdamWChangesTheWeightsAsTheF32PathDoesOverSteps) {
  // The update really moves bf16 weights (lr large enough to exceed bf16 resolution), and
  // small updates below it are lost, as in PyTorch's pure-bf16 training.
  const int64_t n = 64;
  OwnedTensor p({n}, DType::BF16), g({n}, DType::BF16), m = OwnedTensor::zeros({n}, DType::BF16),
                                                        v = OwnedTensor::zeros({n}, DType::BF16);
  p->fill_f32(1.0f);
  g->fill_f32(1.0f);
  ops::AdamWHyper h;
  h.lr = 1e-4f;  // 1 - 1e-4 rounds back to 1 in bf16 (ulp at 1 is 2^-7)
  ops::adamw_step(p, Tensor(), g, m, v, h);
  EXPECT_EQ(p->get_f32(0), 1.0f);
  h.lr = 0.05f;
  h.step = 2;
  ops::adamw_step(p, Tensor(), g, m, v, h);
  EXPECT_EQ(p->get_f32(0), to_f32(to_bf16(1.0f - 0.05f)));
}

// Each optimizer's bf16-state update equals: widen p and state to f32, run the f32-state
// path with the f32 parameter as its own master, round p and state to bf16. Bit for bit,
// with segments of different weight decay.
TEST(NoMasterKernel, EveryOptimizerEqualsTheF32PathRoundedBitwise) {
  const int64_t n = 40000;  // above the parallel threshold
  const OptimizerSegments segs = {{0, 17, 0.0f}, {17, 29990, 0.1f}, {30010, 9990, 0.0f}};
  for (int kind = 0; kind < 4; ++kind) {  // AdamW, SGD momentum + nesterov, SGD plain, Lion
    SCOPED_TRACE(kind);
    OwnedTensor p = random_tensor(n, DType::BF16, 5, 1, 1.0f);
    OwnedTensor s1 = random_tensor(n, DType::BF16, 5, 2, 1e-2f);
    OwnedTensor s2 = random_v(n, 5);
    OwnedTensor pf = widen(p), s1f = widen(s1), s2f = widen(s2);
    for (int step = 1; step <= 3; ++step) {
      const OwnedTensor g = random_tensor(n, DType::BF16, 6, static_cast<uint64_t>(step), 1.0f);
      if (kind == 0) {
        ops::AdamWHyper h;
        h.lr = 3e-3f;
        h.step = step;
        h.grad_scale = 0.25f;
        ops::adamw_step_segments(p, Tensor(), g, s1, s2, h, segs);
        ops::adamw_step_segments(pf, Tensor(), g, s1f, s2f, h, segs);
      } else if (kind <= 2) {
        ops::SgdHyper h;
        h.lr = 0.05f;
        h.momentum = kind == 1 ? 0.9f : 0.0f;
        h.nesterov = kind == 1 ? Nesterov::On : Nesterov::Off;
        h.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
        ops::sgd_step_segments(p, Tensor(), g, kind == 1 ? s1.view() : Tensor(), h, segs);
        ops::sgd_step_segments(pf, Tensor(), g, kind == 1 ? s1f.view() : Tensor(), h, segs);
      } else {
        ops::LionHyper h;
        h.lr = 1e-3f;
        h.grad_scale = 2.0f;
        ops::lion_step_segments(p, Tensor(), g, s1, h, segs);
        ops::lion_step_segments(pf, Tensor(), g, s1f, h, segs);
      }
      // The reference keeps bf16 values between steps, as the bf16 state does.
      OwnedTensor r({n}, DType::BF16);
      for (OwnedTensor* t : {&pf, &s1f, &s2f}) {
        r->copy_from(t->view());
        (*t)->copy_from(r.view());
      }
    }
    for (auto [got, want, name] : {std::make_tuple(&p, &pf, "param"), std::make_tuple(&s1, &s1f, "state 1"),
                                   std::make_tuple(&s2, &s2f, "state 2")}) {
      OwnedTensor w({n}, DType::BF16);
      w->copy_from(want->view());
      ASSERT_EQ(0, std::memcmp((*got)->data(), w->data(), static_cast<size_t>(n) * 2)) << name;
    }
  }
}

TEST(NoMasterKernel, RefusedCombinations) {
  const int64_t n = 16;
  OwnedTensor pb = OwnedTensor::zeros({n}, DType::BF16), ph = OwnedTensor::zeros({n}, DType::F16),
              g = OwnedTensor::zeros({n}, DType::F32), mb = OwnedTensor::zeros({n}, DType::BF16),
              mf = OwnedTensor::zeros({n}, DType::F32), master = OwnedTensor::zeros({n}, DType::F32);
  ops::AdamWHyper h;
  // bf16 parameter without master, f32 state: the state must follow the parameter.
  EXPECT_THROW(ops::adamw_step(pb, Tensor(), g, mf, mf, h), Error);
  // f16 parameter without master (with f16 or f32 state).
  OwnedTensor mh = OwnedTensor::zeros({n}, DType::F16);
  EXPECT_THROW(ops::adamw_step(ph, Tensor(), g, mh, mh, h), Error);
  EXPECT_THROW(ops::adamw_step(ph, Tensor(), g, mf, mf, h), Error);
  // bf16 state with an f32 master.
  EXPECT_THROW(ops::adamw_step(pb, master, g, mb, mb, h), Error);
  // Mixed state dtypes.
  EXPECT_THROW(ops::adamw_step(pb, Tensor(), g, mb, mf, h), Error);
  // The accepted form runs.
  EXPECT_NO_THROW(ops::adamw_step(pb, Tensor(), g, mb, mb, h));
}

// --- the optimizer classes ---------------------------------------------------------------

namespace {

struct Model {
  model::ParameterRegistry reg;
  explicit Model(DType dtype, uint64_t seed = 7) {
    auto spec = [](const char* name, Shape shape, model::WeightDecay decay) {
      model::ParamSpec s;
      s.name = name;
      s.shape = std::move(shape);
      s.decay = decay;
      return s;
    };
    reg.add_unit("embed", {spec("w", {8, 5}, model::WeightDecay::Apply), spec("b", {5}, model::WeightDecay::Skip)}, 2);
    reg.add_unit("block.0",
                 {spec("big", {40000}, model::WeightDecay::Apply), spec("gain", {7}, model::WeightDecay::Skip)}, 1);
    uint64_t stream = 0;
    for (auto& u : reg.units()) {
      u->allocate_params(dtype, Device::cpu());
      u->allocate_grads(dtype, Device::cpu());
      for (auto& p : u->params()) fill_normal(p.value, Philox(seed, ++stream), 0.0f, 1.0f);
    }
  }
  void set_grads(uint64_t step) {
    uint64_t stream = 0;
    for (auto& u : reg.units())
      for (auto& p : u->params()) fill_normal(p.grad, Philox(1000 + step, ++stream), 0.0f, 1.0f);
  }
  std::vector<float> params() {
    std::vector<float> out;
    for (auto& u : reg.units()) {
      auto v = u->flat_params().to_f32_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  int64_t padded() const {
    int64_t n = 0;
    for (const auto& u : reg.units()) n += u->padded_numel();
    return n;
  }
};

OptimizerSpec spec_of(OptimizerType type, MasterWeights mw) {
  OptimizerSpec s;
  s.type = type;
  s.weight_decay = 0.1f;
  s.master_weights = mw;
  if (type == OptimizerType::SGD) {
    s.momentum = 0.9f;
    s.nesterov = true;
  }
  if (type == OptimizerType::Lion) s.beta2 = 0.99f;
  return s;
}

const OptimizerType kTypes[] = {OptimizerType::AdamW, OptimizerType::Adam, OptimizerType::SGD, OptimizerType::Lion};

}  // namespace

TEST(NoMasterOptimizer, StateIsBf16WithoutMasterAndHalvesModelState) {
  Model m(DType::BF16);
  auto with = make_optimizer(m.reg, spec_of(OptimizerType::AdamW, MasterWeights::F32));
  auto without = make_optimizer(m.reg, spec_of(OptimizerType::AdamW, MasterWeights::None));
  std::vector<std::string> names;
  size_t bytes = 0;
  for (auto& [name, t] : without->state_tensors()) {
    names.push_back(name);
    EXPECT_EQ(t.dtype(), DType::BF16) << name;
    bytes += t.nbytes();
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"embed.exp_avg", "embed.exp_avg_sq", "block.0.exp_avg", "block.0.exp_avg_sq"}));
  EXPECT_EQ(bytes, without->state_bytes());
  // Adam: master + m + v = 12 bytes per element with the master, m + v = 4 without; with
  // the bf16 parameters and gradients (4 bytes), 16 -> 8 bytes of model state.
  const size_t P = static_cast<size_t>(m.padded());
  EXPECT_EQ(with->state_bytes(), 12 * P);
  EXPECT_EQ(without->state_bytes(), 4 * P);
  // SGD momentum and Lion's exp_avg follow the same rule: bf16, no master.
  auto sgd = make_optimizer(m.reg, spec_of(OptimizerType::SGD, MasterWeights::None));
  EXPECT_EQ(sgd->state_bytes(), 2 * P);
  auto lion = make_optimizer(m.reg, spec_of(OptimizerType::Lion, MasterWeights::None));
  EXPECT_EQ(lion->state_bytes(), 2 * P);
  OptimizerSpec plain = spec_of(OptimizerType::SGD, MasterWeights::None);
  plain.momentum = 0.0f;
  plain.nesterov = false;
  EXPECT_EQ(make_optimizer(m.reg, plain)->state_bytes(), 0u);
  // f32 parameters are their own master either way: f32 state.
  Model f(DType::F32);
  auto f32_none = make_optimizer(f.reg, spec_of(OptimizerType::AdamW, MasterWeights::None));
  for (auto& [name, t] : f32_none->state_tensors()) EXPECT_EQ(t.dtype(), DType::F32) << name;
  EXPECT_EQ(f32_none->state_bytes(), 8 * P);
}

TEST(NoMasterOptimizer, Fp16WithoutMasterIsRefused) {
  Model m(DType::F16);
  try {
    make_optimizer(m.reg, spec_of(OptimizerType::AdamW, MasterWeights::None));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("use bf16 or keep master weights"), std::string::npos) << e.what();
  }
}

TEST(NoMasterOptimizer, TrainsPartitionsAndResumesBitwise) {
  for (OptimizerType type : kTypes) {
    SCOPED_TRACE(optimizer_type_name(type));
    const OptimizerSpec spec = spec_of(type, MasterWeights::None);
    // Two "ranks" owning halves (cut inside parameters) equal one whole-unit optimizer.
    Model whole(DType::BF16), halves(DType::BF16), resumed(DType::BF16);
    auto part = [&halves](int r) {
      return [&halves, r](size_t ui) {
        model::Unit& u = halves.reg.unit(ui);
        const int64_t cut = u.padded_numel() / 2, begin = r == 0 ? 0 : cut;
        const int64_t len = r == 0 ? cut : u.padded_numel() - cut;
        return UnitPartition{begin, u.flat_params().narrow(0, begin, len), u.flat_grads().narrow(0, begin, len)};
      };
    };
    auto ow = make_optimizer(whole.reg, spec);
    auto o0 = make_optimizer(halves.reg, spec, part(0));
    auto o1 = make_optimizer(halves.reg, spec, part(1));
    auto orr = make_optimizer(resumed.reg, spec);
    const std::vector<float> before = whole.params();
    for (uint64_t step = 0; step < 4; ++step) {
      whole.set_grads(step);
      halves.set_grads(step);
      ow->step(0.01f, 0.5f);
      o0->step(0.01f, 0.5f);
      o1->step(0.01f, 0.5f);
      if (step == 1) {
        // "Checkpoint" after two steps: parameters, bf16 state and step count.
        for (size_t u = 0; u < whole.reg.size(); ++u)
          resumed.reg.unit(u).flat_params().copy_from(whole.reg.unit(u).flat_params());
        auto sa = ow->state_tensors(), sb = orr->state_tensors();
        ASSERT_EQ(sa.size(), sb.size());
        for (size_t i = 0; i < sa.size(); ++i) sb[i].second.copy_from(sa[i].second);
        orr->set_steps_taken(ow->steps_taken());
      } else if (step > 1) {
        resumed.set_grads(step);
        orr->step(0.01f, 0.5f);
      }
    }
    EXPECT_NE(whole.params(), before);
    EXPECT_EQ(whole.params(), halves.params());
    EXPECT_EQ(whole.params(), resumed.params());
  }
}

// --- checkpoints across recipes --------------------------------------------------------------

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::path(ZT_BINARY_DIR) / "test_tmp" / ("no_master_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// What training_run.cpp hands the checkpoint code: parameters, then the optimizer's state,
// the master optional when loading.
std::vector<checkpoint::FlatSlice> slices(Model& m, Optimizer& o, bool for_load) {
  std::vector<checkpoint::FlatSlice> out = checkpoint::whole_param_slices(m.reg);
  for (StateSlice& s : o.state_slices()) {
    checkpoint::FlatSlice f{s.name, s.data, s.begin};
    f.optional = for_load && s.name.size() > 7 && s.name.compare(s.name.size() - 7, 7, ".master") == 0;
    out.push_back(std::move(f));
  }
  return out;
}

Tensor state(Optimizer& o, const std::string& name) {
  for (auto& [n, t] : o.state_tensors())
    if (n == name) return t;
  ADD_FAILURE() << "no state " << name;
  return Tensor();
}

}  // namespace

TEST(NoMasterCheckpoint, MasterCheckpointLoadsIntoANoMasterRunRoundingTheState) {
  const fs::path dir = scratch("to_none");
  Model a(DType::BF16, 1), b(DType::BF16, 2);
  auto oa = make_optimizer(a.reg, spec_of(OptimizerType::AdamW, MasterWeights::F32));
  auto ob = make_optimizer(b.reg, spec_of(OptimizerType::AdamW, MasterWeights::None));
  for (uint64_t step = 0; step < 2; ++step) {
    a.set_grads(step);
    oa->step(0.01f, 1.0f);
  }
  checkpoint::CheckpointState st;
  st.step = 2;
  const std::string saved =
      checkpoint::save_checkpoint(dir.string(), a.reg, slices(a, *oa, false), st, checkpoint::CheckpointWriteOptions{});
  const checkpoint::CheckpointState got = checkpoint::load_checkpoint(saved, b.reg, slices(b, *ob, true));
  EXPECT_TRUE(got.absent.empty());
  EXPECT_NE(std::find(got.saved_optimizer_state.begin(), got.saved_optimizer_state.end(), "embed.master"),
            got.saved_optimizer_state.end());
  EXPECT_EQ(a.params(), b.params());
  for (const char* name : {"embed.exp_avg", "block.0.exp_avg", "block.0.exp_avg_sq"}) {
    const Tensor f = state(*oa, name), h = state(*ob, name);
    ASSERT_EQ(h.dtype(), DType::BF16);
    for (int64_t i = 0; i < f.numel(); ++i)
      ASSERT_EQ(h.get_f32(i), to_f32(to_bf16(f.get_f32(i)))) << name << "[" << i << "]";
  }
  fs::remove_all(dir);
}

TEST(NoMasterCheckpoint, NoMasterCheckpointLoadsIntoAMasterRunWideningExactly) {
  const fs::path dir = scratch("to_master");
  Model a(DType::BF16, 1), b(DType::BF16, 2);
  auto oa = make_optimizer(a.reg, spec_of(OptimizerType::AdamW, MasterWeights::None));
  auto ob = make_optimizer(b.reg, spec_of(OptimizerType::AdamW, MasterWeights::F32));
  for (uint64_t step = 0; step < 2; ++step) {
    a.set_grads(step);
    oa->step(0.01f, 1.0f);
  }
  checkpoint::CheckpointState st;
  st.step = 2;
  const std::string saved =
      checkpoint::save_checkpoint(dir.string(), a.reg, slices(a, *oa, false), st, checkpoint::CheckpointWriteOptions{});
  // Without the optional flag the missing master is an error naming it.
  std::vector<checkpoint::FlatSlice> strict = slices(b, *ob, false);
  try {
    checkpoint::load_checkpoint(saved, b.reg, strict);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embed.master"), std::string::npos) << e.what();
  }
  const checkpoint::CheckpointState got = checkpoint::load_checkpoint(saved, b.reg, slices(b, *ob, true));
  EXPECT_EQ(got.absent, (std::vector<std::string>{"embed.master", "block.0.master"}));
  ob->init_master_from_params();
  EXPECT_EQ(a.params(), b.params());
  for (const char* unit : {"embed", "block.0"}) {
    const Tensor master = state(*ob, std::string(unit) + ".master");
    const Tensor params = unit == std::string("embed") ? b.reg.unit(0).flat_params() : b.reg.unit(1).flat_params();
    for (int64_t i = 0; i < master.numel(); ++i) ASSERT_EQ(master.get_f32(i), params.get_f32(i)) << unit << i;
    for (const char* s : {".exp_avg", ".exp_avg_sq"}) {
      const Tensor h = state(*oa, unit + std::string(s)), f = state(*ob, unit + std::string(s));
      ASSERT_EQ(f.dtype(), DType::F32);
      for (int64_t i = 0; i < f.numel(); ++i) ASSERT_EQ(f.get_f32(i), h.get_f32(i)) << unit << s << "[" << i << "]";
    }
  }
  // And the master run continues from there.
  b.set_grads(5);
  ob->set_steps_taken(2);
  EXPECT_NO_THROW(ob->step(0.01f, 1.0f));
  fs::remove_all(dir);
}

// --- the run config key --------------------------------------------------------------------

namespace {

std::string config_error(const std::vector<std::string>& args) {
  try {
    config::load_train_config(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(NoMasterConfig, DefaultsToMasterWeightsAndCarriesFalseIntoTheOptimizerSpec) {
  const config::TrainConfig d = config::load_train_config({"--bf16", "true"});
  EXPECT_EQ(d.optimizer.master_weights, MasterWeights::F32);
  EXPECT_NE(config::describe_config(d).find("master_weights"), std::string::npos);
  const config::TrainConfig c = config::load_train_config({"--bf16", "true", "--master_weights", "false"});
  EXPECT_EQ(c.optimizer.master_weights, MasterWeights::None);
  EXPECT_EQ(c.origin.at("master_weights"), "command line");
  const std::string dump = config::describe_config(c);
  EXPECT_NE(dump.find("no master"), std::string::npos) << dump;
  // Precision from a ds_config bf16 block counts too.
  const fs::path dir = scratch("config");
  std::ofstream(dir / "ds.json") << R"({"bf16": {"enabled": true}, "train_micro_batch_size_per_gpu": 8})";
  EXPECT_EQ(config::load_train_config({"--deepspeed", (dir / "ds.json").string(), "--master_weights", "false"})
                .optimizer.master_weights,
            MasterWeights::None);
  fs::remove_all(dir);
}

TEST(NoMasterConfig, NeedsBf16) {
  const std::string f32 = config_error({"--master_weights", "false"});
  EXPECT_NE(f32.find("master_weights"), std::string::npos) << f32;
  EXPECT_NE(f32.find("bf16: true"), std::string::npos) << f32;
  const std::string f16 = config_error({"--fp16", "true", "--master_weights", "false"});
  EXPECT_NE(f16.find("master_weights"), std::string::npos) << f16;
  EXPECT_NE(f16.find("use bf16 or keep master weights"), std::string::npos) << f16;
  const std::string bad = config_error({"--bf16", "true", "--master_weights", "sometimes"});
  EXPECT_NE(bad.find("master_weights"), std::string::npos) << bad;
}
