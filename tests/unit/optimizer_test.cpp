// SGD and Lion kernels against double-precision transcriptions of torch.optim.SGD and
// the published Lion update; the segmented updates (one call, per-segment weight decay)
// against per-segment calls, bit for bit; the Optimizer classes over a parameter registry:
// per-parameter weight decay, partitions that cut parameters, state naming, master
// copies, resume, and spec validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/optimizer.h"
#include "zero/optimizer.h"
#include "zero/optimizer_base.h"
#include "zero/partition.h"
#include "zero/state_store.h"

using namespace zt;
using namespace zt::zero;

namespace {

std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.get_f32(i);
  return out;
}

// --- kernels ---------------------------------------------------------------------------

TEST(SgdKernel, MatchesTorchFormula) {
  struct Case {
    float momentum, dampening, wd;
    Nesterov nesterov;
  };
  for (const Case c : {Case{0.0f, 0.0f, 0.0f, Nesterov::Off}, Case{0.0f, 0.0f, 0.1f, Nesterov::Off},
                       Case{0.9f, 0.0f, 0.01f, Nesterov::On}, Case{0.8f, 0.3f, 0.05f, Nesterov::Off}}) {
    const int64_t n = 300;
    OwnedTensor p({n}, DType::F32), g({n}, DType::F32);
    OwnedTensor buf = c.momentum != 0.0f ? OwnedTensor::zeros({n}, DType::F32) : OwnedTensor();
    fill_normal(p, Philox(4, 1), 0.0f, 1.0f);
    std::vector<double> rp = to_double(p), rb(n, 0.0);
    ops::SgdHyper h;
    h.lr = 0.05f;
    h.momentum = c.momentum;
    h.dampening = c.dampening;
    h.weight_decay = c.wd;
    h.nesterov = c.nesterov;
    h.grad_scale = 0.25f;
    for (int step = 1; step <= 5; ++step) {
      fill_normal(g, Philox(4, 10 + static_cast<uint64_t>(step)), 0.0f, 2.0f);
      h.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
      ops::sgd_step(p, Tensor(), g, buf.view(), h);
      for (int64_t i = 0; i < n; ++i) {
        double d = static_cast<double>(g->get_f32(i)) * h.grad_scale + static_cast<double>(c.wd) * rp[i];
        if (c.momentum != 0.0f) {
          rb[i] = step == 1 ? d : c.momentum * rb[i] + (1.0 - c.dampening) * d;
          d = c.nesterov == Nesterov::On ? d + c.momentum * rb[i] : rb[i];
        }
        rp[i] -= static_cast<double>(h.lr) * d;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(p->get_f32(i), rp[i], 1e-6 * (1 + std::fabs(rp[i]))) << "momentum " << c.momentum << " i " << i;
  }
}

TEST(SgdKernel, BufferIsNeededExactlyWithMomentum) {
  OwnedTensor p = OwnedTensor::zeros({4}, DType::F32), g = OwnedTensor::zeros({4}, DType::F32),
              buf = OwnedTensor::zeros({4}, DType::F32);
  ops::SgdHyper h;
  h.momentum = 0.9f;
  EXPECT_THROW(ops::sgd_step(p, Tensor(), g, Tensor(), h), Error);
  h.momentum = 0.0f;
  EXPECT_THROW(ops::sgd_step(p, Tensor(), g, buf, h), Error);
}

TEST(LionKernel, MatchesPublishedUpdate) {
  const int64_t n = 500;
  OwnedTensor p({n}, DType::F32), g({n}, DType::F32), m = OwnedTensor::zeros({n}, DType::F32);
  fill_normal(p, Philox(5, 1), 0.0f, 1.0f);
  std::vector<double> rp = to_double(p), rm(n, 0.0);
  ops::LionHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.5f;
  h.grad_scale = 2.0f;
  for (int step = 1; step <= 6; ++step) {
    fill_normal(g, Philox(5, 10 + static_cast<uint64_t>(step)), 0.0f, 1.0f);
    if (step == 3) g->set_f32(7, 0.0f);  // with m = 0 nowhere, sign(c) is still defined
    ops::lion_step(p, Tensor(), g, m, h);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g->get_f32(i)) * h.grad_scale;
      rp[i] *= 1.0 - static_cast<double>(h.lr) * h.weight_decay;
      const double c = h.beta1 * rm[i] + (1.0 - h.beta1) * gi;
      rp[i] -= static_cast<double>(h.lr) * ((c > 0) - (c < 0));
      rm[i] = h.beta2 * rm[i] + (1.0 - h.beta2) * gi;
    }
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(p->get_f32(i), rp[i], 1e-6 * (1 + std::fabs(rp[i]))) << i;
}

TEST(LionKernel, ZeroDirectionLeavesOnlyTheDecay) {
  OwnedTensor p({3}, DType::F32), g = OwnedTensor::zeros({3}, DType::F32), m = OwnedTensor::zeros({3}, DType::F32);
  p->fill_f32(2.0f);
  ops::LionHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.5f;
  ops::lion_step(p, Tensor(), g, m, h);
  for (int64_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(p->get_f32(i), 2.0f * (1 - 0.05f));
}

// --- segmented updates -------------------------------------------------------------------

enum class SegKind { AdamW, AdamL2, Sgd, SgdMomentum, Lion };
const char* seg_kind_name(SegKind k) {
  switch (k) {
    case SegKind::AdamW:
      return "AdamW";
    case SegKind::AdamL2:
      return "Adam L2";
    case SegKind::Sgd:
      return "SGD";
    case SegKind::SgdMomentum:
      return "SGD Nesterov momentum";
    case SegKind::Lion:
      return "Lion";
  }
  return "?";
}

// Parameters, master, gradient and two state buffers of n elements.
struct SegBuffers {
  OwnedTensor param, master, grad, s1, s2;
  SegBuffers(int64_t n, DType pdt, DType gdt, uint64_t seed) {
    param = OwnedTensor({n}, pdt);
    fill_normal(param, Philox(seed, 1), 0.0f, 1.0f);
    if (pdt != DType::F32) {
      master = OwnedTensor({n}, DType::F32);
      master->copy_from(param);
    }
    grad = OwnedTensor({n}, gdt);
    s1 = OwnedTensor({n}, DType::F32);
    s2 = OwnedTensor({n}, DType::F32);
    fill_normal(s1, Philox(seed, 2), 0.0f, 0.01f);
    fill_normal(s2, Philox(seed, 3), 0.0f, 0.01f);
    for (int64_t i = 0; i < n; ++i) s2->set_f32(i, s2->get_f32(i) * s2->get_f32(i));
  }
  Tensor m() const { return master.view().data() ? master.view() : Tensor(); }
};

Tensor narrow_or_empty(const Tensor& t, int64_t off, int64_t n) { return t.data() ? t.narrow(0, off, n) : Tensor(); }

// One step of `kind` over the whole buffers: segmented (one call), or one call per segment.
void seg_step(SegKind kind, int64_t step, const SegBuffers& b, const OptimizerSegments& segs, bool per_segment) {
  ops::AdamWHyper ah;
  ah.lr = 1e-2f;
  ah.step = step;
  ah.grad_scale = 0.5f;
  ah.decay = kind == SegKind::AdamL2 ? AdamDecay::L2 : AdamDecay::Decoupled;
  ops::SgdHyper sh;
  sh.lr = 0.05f;
  sh.grad_scale = 0.5f;
  if (kind == SegKind::SgdMomentum) {
    sh.momentum = 0.9f;
    sh.nesterov = Nesterov::On;
    sh.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
  }
  ops::LionHyper lh;
  lh.lr = 3e-3f;
  lh.grad_scale = 0.5f;
  const bool momentum = kind == SegKind::SgdMomentum;
  if (!per_segment) {
    switch (kind) {
      case SegKind::AdamW:
      case SegKind::AdamL2:
        ops::adamw_step_segments(b.param, b.m(), b.grad, b.s1, b.s2, ah, segs);
        return;
      case SegKind::Sgd:
      case SegKind::SgdMomentum:
        ops::sgd_step_segments(b.param, b.m(), b.grad, momentum ? b.s1.view() : Tensor(), sh, segs);
        return;
      case SegKind::Lion:
        ops::lion_step_segments(b.param, b.m(), b.grad, b.s1, lh, segs);
        return;
    }
  }
  for (const OptimizerSegment& sg : segs) {
    const int64_t o = sg.offset, n = sg.length;
    const Tensor p = b.param->narrow(0, o, n), ms = narrow_or_empty(b.m(), o, n), g = b.grad->narrow(0, o, n),
                 s1 = b.s1->narrow(0, o, n), s2 = b.s2->narrow(0, o, n);
    ah.weight_decay = sh.weight_decay = lh.weight_decay = sg.weight_decay;
    switch (kind) {
      case SegKind::AdamW:
      case SegKind::AdamL2:
        ops::adamw_step(p, ms, g, s1, s2, ah);
        break;
      case SegKind::Sgd:
      case SegKind::SgdMomentum:
        ops::sgd_step(p, ms, g, momentum ? s1 : Tensor(), sh);
        break;
      case SegKind::Lion:
        ops::lion_step(p, ms, g, s1, lh);
        break;
    }
  }
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float f : t.to_f32_vector()) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    out.push_back(u);
  }
  return out;
}

TEST(SegmentedUpdate, EqualsPerSegmentCallsBitwise) {
  // Segments of odd lengths and offsets, gaps between some (left untouched), weight decays
  // that differ, and one segment above the CPU kernels' parallel threshold.
  const OptimizerSegments segs = {{0, 5, 0.1f},     {5, 3, 0.0f},        {16, 1000, 0.2f}, {1016, 7, 0.0f},
                                  {1030, 1, 0.05f}, {1100, 40001, 0.1f}, {41101, 9, 0.0f}, {41200, 77, 0.3f}};
  const int64_t n = 41300;
  std::vector<char> in_segment(static_cast<size_t>(n), 0);
  for (const auto& sg : segs)
    for (int64_t i = sg.offset; i < sg.offset + sg.length; ++i) in_segment[static_cast<size_t>(i)] = 1;
  uint64_t seed = 10;
  for (SegKind kind : {SegKind::AdamW, SegKind::AdamL2, SegKind::Sgd, SegKind::SgdMomentum, SegKind::Lion})
    for (DType pdt : {DType::F32, DType::BF16})
      for (DType gdt : {DType::F32, DType::F16}) {
        SCOPED_TRACE(std::string(seg_kind_name(kind)) + " param " + dtype_name(pdt) + " grad " + dtype_name(gdt));
        ++seed;
        SegBuffers a(n, pdt, gdt, seed), b(n, pdt, gdt, seed);
        const std::vector<float> p0 = a.param->to_f32_vector();
        for (int64_t step = 1; step <= 3; ++step) {
          fill_normal(a.grad, Philox(seed, 100 + static_cast<uint64_t>(step)), 0.0f, 1.0f);
          b.grad->copy_from(a.grad);
          seg_step(kind, step, a, segs, false);
          seg_step(kind, step, b, segs, true);
        }
        EXPECT_EQ(bits_of(a.param), bits_of(b.param));
        if (a.master.view().data()) {
          EXPECT_EQ(bits_of(a.master), bits_of(b.master));
        }
        EXPECT_EQ(bits_of(a.s1), bits_of(b.s1));
        EXPECT_EQ(bits_of(a.s2), bits_of(b.s2));
        // The gaps kept their values, and the segments did move.
        const std::vector<float> p = a.param->to_f32_vector();
        int64_t moved = 0;
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = static_cast<size_t>(i);
          if (in_segment[k]) {
            moved += p[k] != p0[k];
          } else {
            ASSERT_EQ(p[k], p0[k]) << "gap element " << i;
          }
        }
        EXPECT_GT(moved, n / 2);
      }
}

TEST(SegmentedUpdate, RejectsOverlappingOrOutOfRangeSegments) {
  SegBuffers b(100, DType::F32, DType::F32, 3);
  ops::AdamWHyper h;
  EXPECT_THROW(ops::adamw_step_segments(b.param, Tensor(), b.grad, b.s1, b.s2, h, {{0, 10, 0.0f}, {9, 5, 0.1f}}),
               Error);
  EXPECT_THROW(ops::adamw_step_segments(b.param, Tensor(), b.grad, b.s1, b.s2, h, {{20, 5, 0.0f}, {0, 5, 0.1f}}),
               Error);
  EXPECT_THROW(ops::lion_step_segments(b.param, Tensor(), b.grad, b.s1, ops::LionHyper{}, {{95, 6, 0.0f}}), Error);
  EXPECT_THROW(ops::sgd_step_segments(b.param, Tensor(), b.grad, Tensor(), ops::SgdHyper{}, {{-1, 6, 0.0f}}), Error);
  // Empty segments and an empty list are fine (the latter updates nothing).
  const std::vector<float> p0 = b.param->to_f32_vector();
  ops::sgd_step_segments(b.param, Tensor(), b.grad, Tensor(), ops::SgdHyper{}, {});
  ops::sgd_step_segments(b.param, Tensor(), b.grad, Tensor(), ops::SgdHyper{}, {{0, 0, 0.1f}, {100, 0, 0.0f}});
  EXPECT_EQ(b.param->to_f32_vector(), p0);
}

// --- optimizers over a registry -------------------------------------------------------

// Two units: a weight (decayed) and a bias (not) in one, a large weight (parallel path)
// and a norm gain (not decayed) in the other.
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
};

OptimizerSpec spec_of(OptimizerType type) {
  OptimizerSpec s;
  s.type = type;
  s.weight_decay = 0.1f;
  if (type == OptimizerType::SGD) {
    s.momentum = 0.9f;
    s.nesterov = true;
  }
  if (type == OptimizerType::Lion) s.beta2 = 0.99f;
  if (type == OptimizerType::Adam) s.adam_w_mode = false;
  return s;
}

const OptimizerType kAllTypes[] = {OptimizerType::AdamW, OptimizerType::Adam, OptimizerType::SGD, OptimizerType::Lion};

TEST(Optimizer, WeightDecaySkipsNoDecayParameters) {
  // Zero gradients: AdamW and Lion then only apply their decoupled decay, p *= 1 - lr*wd
  // (Adam's moments stay 0, Lion's sign(0) = 0). SGD's L2 gives d = wd*p, the buffer
  // starts as d, and Nesterov adds momentum*buf: p *= 1 - lr*wd*(1 + momentum).
  for (OptimizerType type : {OptimizerType::AdamW, OptimizerType::SGD, OptimizerType::Lion}) {
    Model m(DType::F32);
    const float w0 = m.reg.find("w")->value.get_f32(3), b0 = m.reg.find("b")->value.get_f32(2);
    const float big0 = m.reg.find("big")->value.get_f32(39999), g0 = m.reg.find("gain")->value.get_f32(6);
    for (auto& u : m.reg.units()) u->flat_grads().zero();
    OptimizerSpec s = spec_of(type);
    s.weight_decay = 0.5f;
    auto opt = make_optimizer(m.reg, s);
    opt->step(0.1f, 1.0f);
    const float factor = type == OptimizerType::SGD ? 1 - 0.1f * 0.5f * 1.9f : 1 - 0.1f * 0.5f;
    EXPECT_FLOAT_EQ(m.reg.find("w")->value.get_f32(3), w0 * factor) << optimizer_type_name(type);
    EXPECT_FLOAT_EQ(m.reg.find("big")->value.get_f32(39999), big0 * factor) << optimizer_type_name(type);
    EXPECT_EQ(m.reg.find("b")->value.get_f32(2), b0) << optimizer_type_name(type);
    EXPECT_EQ(m.reg.find("gain")->value.get_f32(6), g0) << optimizer_type_name(type);
  }
}

TEST(Optimizer, PartitionsThatCutParametersMatchTheWholeUnitBitwise) {
  // Two "ranks" each update their part of every unit; the parts cut parameters (and so
  // their weight decay segments) mid-way. Together they must equal one
  // optimizer over the whole units, bit for bit.
  for (OptimizerType type : kAllTypes) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Model whole(dtype), halves(dtype);
      // Rank 0 owns [0, cut), rank 1 [cut, padded_numel), cut = half (rounded down: odd
      // cuts too, inside a parameter).
      auto part = [&halves](int r) {
        return [&halves, r](size_t ui) {
          model::Unit& u = halves.reg.unit(ui);
          const int64_t cut = u.padded_numel() / 2, begin = r == 0 ? 0 : cut;
          const int64_t len = r == 0 ? cut : u.padded_numel() - cut;
          return zero::UnitPartition{begin, u.flat_params().narrow(0, begin, len),
                                     u.flat_grads().narrow(0, begin, len)};
        };
      };
      auto part0 = part(0), part1 = part(1);
      auto ow = make_optimizer(whole.reg, spec_of(type));
      auto o0 = make_optimizer(halves.reg, spec_of(type), part0);
      auto o1 = make_optimizer(halves.reg, spec_of(type), part1);
      for (uint64_t step = 0; step < 3; ++step) {
        whole.set_grads(step);
        halves.set_grads(step);
        ow->step(0.01f, 0.5f);
        o0->step(0.01f, 0.5f);
        o1->step(0.01f, 0.5f);
      }
      EXPECT_EQ(whole.params(), halves.params()) << optimizer_type_name(type) << " " << dtype_name(dtype);
    }
  }
}

TEST(Optimizer, StateTensorsAreNamedPerUnit) {
  auto names = [](Optimizer& o) {
    std::vector<std::string> n;
    size_t bytes = 0;
    for (auto& [name, t] : o.state_tensors()) {
      n.push_back(name);
      bytes += t.nbytes();
    }
    EXPECT_EQ(bytes, o.state_bytes());
    return n;
  };
  Model f32(DType::F32), bf16(DType::BF16);
  auto adam = make_optimizer(f32.reg, spec_of(OptimizerType::AdamW));
  EXPECT_EQ(names(*adam),
            (std::vector<std::string>{"embed.exp_avg", "embed.exp_avg_sq", "block.0.exp_avg", "block.0.exp_avg_sq"}));
  auto lion = make_optimizer(bf16.reg, spec_of(OptimizerType::Lion));
  EXPECT_EQ(names(*lion),
            (std::vector<std::string>{"embed.master", "embed.exp_avg", "block.0.master", "block.0.exp_avg"}));
  auto sgd = make_optimizer(f32.reg, spec_of(OptimizerType::SGD));
  EXPECT_EQ(names(*sgd), (std::vector<std::string>{"embed.momentum_buffer", "block.0.momentum_buffer"}));
  OptimizerSpec plain;
  plain.type = OptimizerType::SGD;
  auto plain_sgd = make_optimizer(f32.reg, plain);
  EXPECT_TRUE(names(*plain_sgd).empty());
  // Flat per unit, padded: the embed unit (45 + alignment gap, shards of 2).
  EXPECT_EQ(adam->state_tensors()[0].second.numel(), f32.reg.unit(0).padded_numel());
}

TEST(Optimizer, ResumeFromStateContinuesBitwise) {
  for (OptimizerType type : kAllTypes) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Model a(dtype), b(dtype);
      auto oa = make_optimizer(a.reg, spec_of(type));
      auto ob = make_optimizer(b.reg, spec_of(type));
      for (uint64_t step = 0; step < 2; ++step) {
        a.set_grads(step);
        oa->step(0.01f, 0.5f);
      }
      // "Checkpoint": parameters, optimizer state and step count into b's objects.
      for (size_t u = 0; u < a.reg.size(); ++u) b.reg.unit(u).flat_params().copy_from(a.reg.unit(u).flat_params());
      auto sa = oa->state_tensors(), sb = ob->state_tensors();
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) sb[i].second.copy_from(sa[i].second);
      ob->set_steps_taken(oa->steps_taken());
      for (uint64_t step = 2; step < 4; ++step) {
        a.set_grads(step);
        b.set_grads(step);
        oa->step(0.01f, 0.5f);
        ob->step(0.01f, 0.5f);
      }
      EXPECT_EQ(a.params(), b.params()) << optimizer_type_name(type) << " " << dtype_name(dtype);
      EXPECT_EQ(ob->steps_taken(), 4);
    }
  }
}

TEST(Optimizer, MasterPicksUpWeightsLoadedBeforeTheFirstStep) {
  Model m(DType::BF16);
  auto opt = make_optimizer(m.reg, spec_of(OptimizerType::AdamW));
  m.reg.find("w")->value.fill_f32(0.75f);  // e.g. HF weights loaded after building the optimizer
  for (auto& u : m.reg.units()) u->flat_grads().zero();
  opt->step(0.0f, 1.0f);
  EXPECT_EQ(m.reg.find("w")->value.get_f32(11), 0.75f);
}

TEST(Optimizer, GradScaleMultipliesTheGradient) {
  for (OptimizerType type : kAllTypes) {
    Model a(DType::F32), b(DType::F32);
    auto oa = make_optimizer(a.reg, spec_of(type));
    auto ob = make_optimizer(b.reg, spec_of(type));
    for (uint64_t step = 0; step < 3; ++step) {
      a.set_grads(step);
      b.set_grads(step);
      for (auto& u : b.reg.units()) {
        const Tensor g = u->flat_grads();
        for (int64_t i = 0; i < g.numel(); ++i) g.set_f32(i, g.get_f32(i) * 4.0f);  // exact
      }
      oa->step(0.01f, 1.0f);
      ob->step(0.01f, 0.25f);
    }
    EXPECT_EQ(a.params(), b.params()) << optimizer_type_name(type);
  }
}

TEST(Optimizer, SetBetasChangesAdamButNotSgd) {
  Model m(DType::F32);
  auto adam = make_optimizer(m.reg, spec_of(OptimizerType::AdamW));
  adam->set_betas(0.85f, 0.99f);
  EXPECT_EQ(adam->spec().beta1, 0.85f);
  EXPECT_EQ(adam->spec().beta2, 0.99f);
  auto sgd = make_optimizer(m.reg, spec_of(OptimizerType::SGD));
  sgd->set_betas(0.85f, 0.99f);
  EXPECT_EQ(sgd->spec().beta1, 0.9f);
}

TEST(Optimizer, InvalidSpecsNameTheKey) {
  Model m(DType::F32);
  auto expect_key = [&](OptimizerSpec s, const std::string& key) {
    try {
      make_optimizer(m.reg, s);
      FAIL() << "expected an error naming " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  OptimizerSpec s;
  s.beta2 = 1.0f;
  expect_key(s, "optimizer.params.betas");
  s = {};
  s.lr = -1.0f;
  expect_key(s, "optimizer.params.lr");
  s = {};
  s.weight_decay = NAN;
  expect_key(s, "optimizer.params.weight_decay");
  s = {};
  s.type = OptimizerType::SGD;
  s.nesterov = true;
  expect_key(s, "optimizer.params.nesterov");
  s.momentum = 0.9f;
  s.dampening = 0.1f;
  expect_key(s, "optimizer.params.nesterov");
}

TEST(Optimizer, GlobalGradNorm) {
  Model m(DType::F32);
  for (auto& u : m.reg.units()) u->flat_grads().zero();
  m.reg.find("w")->grad.set_f32(0, 3.0f);
  m.reg.find("big")->grad.set_f32(100, 4.0f);
  EXPECT_DOUBLE_EQ(global_grad_norm(m.reg), 5.0);
}

}  // namespace

// State swapped to NVMe in pieces of 3000 elements (the 40007-element unit steps in 14
// pieces, cutting through a parameter), with two buffers and pipelining on and off, steps
// bitwise as state in memory, for every optimizer and both parameter dtypes; its
// checkpoint slices read back what the memory optimizer holds, and writing them into a
// fresh NVMe optimizer continues bitwise.
TEST(Optimizer, NvmeStateInPiecesStepsBitwiseAsMemory) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("opt_nvme_"));
  for (OptimizerType type : kAllTypes) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (bool pipelined : {false, true}) {
        SCOPED_TRACE(std::string(optimizer_type_name(type)) + " " + dtype_name(dtype) + (pipelined ? " pipelined" : ""));
        zero::NvmeStoreOptions n;
        n.nvme_path = dir.path().string();
        n.buffer_count = pipelined ? 3 : 2;
        n.sub_group_size = 3000;
        n.pipeline_read = n.pipeline_write = pipelined;
        Model mem(dtype), swap(dtype), resumed(dtype);
        auto om = make_optimizer(mem.reg, spec_of(type));
        auto os = zero::make_flat_optimizer(swap.reg, spec_of(type), {}, std::make_unique<zero::NvmeStore>(n));
        for (uint64_t step = 0; step < 3; ++step) {
          mem.set_grads(step);
          swap.set_grads(step);
          om->step(0.01f, 0.5f);
          os->step(0.01f, 0.5f);
        }
        EXPECT_EQ(mem.params(), swap.params());
        // Checkpoint slices: the swapped ones read through their io equal the memory views.
        const auto sm = om->state_slices(), ss = os->state_slices();
        ASSERT_EQ(sm.size(), ss.size());
        auto resumed_opt =
            zero::make_flat_optimizer(resumed.reg, spec_of(type), {}, std::make_unique<zero::NvmeStore>(n));
        const auto sr = resumed_opt->state_slices();
        for (size_t i = 0; i < sm.size(); ++i) {
          ASSERT_EQ(sm[i].name, ss[i].name);
          ASSERT_TRUE(ss[i].io) << ss[i].name;
          OwnedTensor got({sm[i].data.numel()}, sm[i].data.dtype());
          ss[i].io->read(0, got);
          EXPECT_EQ(got->to_f32_vector(), sm[i].data.to_f32_vector()) << sm[i].name;
          sr[i].io->write(0, got);
        }
        for (size_t u = 0; u < mem.reg.size(); ++u)
          resumed.reg.unit(u).flat_params().copy_from(mem.reg.unit(u).flat_params());
        resumed_opt->set_steps_taken(om->steps_taken());
        mem.set_grads(3);
        resumed.set_grads(3);
        om->step(0.01f, 0.5f);
        resumed_opt->step(0.01f, 0.5f);
        EXPECT_EQ(mem.params(), resumed.params());
      }
    }
  }
}
