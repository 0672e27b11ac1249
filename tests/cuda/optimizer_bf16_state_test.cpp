// CUDA optimizer updates without master weights (bf16 parameters and bf16 state,
// MasterWeights::None: AdamWOp / SgdOp / LionOp with bf16 state and no master) against the CPU
// backend on the same inputs. Every step starts both devices from the same bf16 state (the
// CPU's, copied to the GPU), so that a value rounded the other way in one step does not
// carry: the CPU build and nvcc may fuse different multiply-adds into FMAs, which moves
// the f32 result by an f32 ulp or so, and a value near a bf16 rounding boundary may then
// round to the neighbouring bf16. After each step every parameter and state value must be
// within 1 bf16 ulp of the CPU's — except where the terms of a value cancel to a far
// smaller result (m near 0), where the bound is a few f32 ulp of those terms; and Lion's
// parameter where its direction c = b1 m + (1-b1) g is within rounding of 0 (the sign may
// differ). Cases: AdamW (decoupled and L2 decay, bias correction off, a late step), SGD
// (plain, momentum with Nesterov, momentum with dampening), Lion; gradients f32/bf16/f16;
// sizes around the 8-element chunk, views shifted by one element (unaligned path); single
// range and segments of odd lengths with gaps that must stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/optimizer.h"

namespace {

using namespace zt;
using zt::testing::make;
using zt::testing::to_host;

// A device tensor `offset` elements past the start of its allocation (offset 1 misaligns
// every 16-byte vector), filled from a host tensor by upload().
struct DeviceCopy {
  OwnedTensor storage;
  Tensor view;
};
DeviceCopy device_like(const Tensor& host, int64_t offset) {
  DeviceCopy d;
  if (host.data() == nullptr) return d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* base = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(dtype_size(host.dtype()));
  d.view = Tensor(base, host.shape(), host.dtype(), Device::cuda(), host.name());
  return d;
}
void upload(const DeviceCopy& d, const Tensor& host) {
  if (host.data() != nullptr) cuda::copy_to_device(d.view.data(), host.data(), host.nbytes());
}
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  if (t.device().is_cuda()) {
    const OwnedTensor h = to_host(t);
    std::memcpy(out.data(), h->data(), out.size() * 2);
  } else {
    std::memcpy(out.data(), t.data(), out.size() * 2);
  }
  return out;
}

std::vector<float> noise(int64_t n, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = scale * (static_cast<float>(s >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  return v;
}

int64_t ulps(uint16_t a, uint16_t b) {
  auto ord = [](uint16_t x) { return (x & 0x8000) ? -static_cast<int32_t>(x & 0x7fff) : static_cast<int32_t>(x); };
  return std::llabs(static_cast<long long>(ord(a)) - ord(b));
}
float f(uint16_t b) { return to_f32(bf16{b}); }

enum class Kind { AdamW, Sgd, Lion };

struct OptCase {
  std::string name;
  Kind kind;
  AdamWHyper adam{};
  SgdHyper sgd{};
  LionHyper lion{};
  int64_t first_step = 1;
  OptimizerSegments segments;  // non-empty: the segmented update
};

OptimizerSegments fit(const OptimizerSegments& segs, int64_t n) {
  OptimizerSegments out;
  for (const OptimizerSegment& s : segs) {
    if (s.offset >= n) break;
    out.push_back({s.offset, std::min(s.length, n - s.offset), s.weight_decay});
  }
  return out;
}

OptimizerSegments odd_segments(int64_t limit) {
  const int64_t lengths[] = {1, 7, 8, 9, 13, 64, 100, 3, 1000, 5, 2000, 17};
  const int64_t gaps[] = {0, 0, 3, 0, 5, 0, 64, 1, 0};
  const float decays[] = {0.1f, 0.0f, 0.05f, 0.2f, 0.0f};
  OptimizerSegments out;
  int64_t pos = 0;
  for (size_t i = 0;; ++i) {
    pos += gaps[i % 9];
    if (pos >= limit) break;
    const int64_t len = std::min(lengths[i % 12], limit - pos);
    out.push_back({pos, len, decays[i % 5]});
    pos += len;
  }
  return out;
}

bool has_s1(const OptCase& c) { return c.kind != Kind::Sgd || c.sgd.momentum != 0.0f; }

void update(const OptCase& c, int64_t step, const Tensor& param, const Tensor& grad, const Tensor& s1,
            const Tensor& s2) {
  const bool segmented = !c.segments.empty();
  const OptimizerSegments segs = fit(c.segments, param.numel());
  switch (c.kind) {
    case Kind::AdamW: {
      AdamWHyper h = c.adam;
      h.step = c.first_step + step - 1;
      if (segmented)
        ops::adamw_step_segments(param, Tensor(), grad, s1, s2, h, segs);
      else
        ops::adamw_step(param, Tensor(), grad, s1, s2, h);
      return;
    }
    case Kind::Sgd: {
      SgdHyper h = c.sgd;
      h.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
      const Tensor buf = has_s1(c) ? s1 : Tensor();
      if (segmented)
        ops::sgd_step_segments(param, Tensor(), grad, buf, h, segs);
      else
        ops::sgd_step(param, Tensor(), grad, buf, h);
      return;
    }
    case Kind::Lion:
      if (segmented)
        ops::lion_step_segments(param, Tensor(), grad, s1, c.lion, segs);
      else
        ops::lion_step(param, Tensor(), grad, s1, c.lion);
      return;
  }
}

void check_case(const OptCase& c, DType gdt, int64_t n, int64_t offset, int steps, uint64_t seed) {
  SCOPED_TRACE(str(c.name, ": grad ", dtype_name(gdt), " n=", n, " offset=", offset));
  const OwnedTensor param = make(noise(n, seed, 1.0f), {n}, DType::BF16);
  OwnedTensor s1, s2;
  if (has_s1(c))
    s1 = make(c.kind == Kind::Sgd ? std::vector<float>(static_cast<size_t>(n), 0.0f) : noise(n, seed + 1, 0.01f), {n},
              DType::BF16);
  if (c.kind == Kind::AdamW) {
    std::vector<float> v = noise(n, seed + 2, 1e-2f);
    for (float& x : v) x = x * x;
    s2 = make(v, {n}, DType::BF16);
  }
  const DeviceCopy g_param = device_like(param, offset), g_s1 = device_like(s1, offset), g_s2 = device_like(s2, offset);
  const std::vector<uint16_t> p_init = bits_of(param);
  std::vector<char> in_segment(static_cast<size_t>(n), c.segments.empty() ? 1 : 0);
  for (const OptimizerSegment& sg : fit(c.segments, n))
    std::fill(in_segment.begin() + sg.offset, in_segment.begin() + sg.offset + sg.length, 1);

  const float beta1 = c.kind == Kind::AdamW ? c.adam.beta1 : c.kind == Kind::Lion ? c.lion.beta1 : c.sgd.momentum;
  const float grad_scale = c.kind == Kind::AdamW ? c.adam.grad_scale
                           : c.kind == Kind::Sgd ? c.sgd.grad_scale
                                                 : c.lion.grad_scale;
  const float lr = c.kind == Kind::AdamW ? c.adam.lr : c.kind == Kind::Sgd ? c.sgd.lr : c.lion.lr;
  constexpr double kF32 = 8.0 / 16777216.0;
  int64_t differ = 0;
  for (int step = 1; step <= steps; ++step) {
    // Both devices start the step from the CPU's state.
    upload(g_param, param);
    upload(g_s1, s1);
    upload(g_s2, s2);
    const std::vector<float> p0 = param->to_f32_vector();
    const std::vector<float> m0 = has_s1(c) ? s1->to_f32_vector() : std::vector<float>();
    const OwnedTensor grad = make(noise(n, seed + 10 + static_cast<uint64_t>(step), 1.0f), {n}, gdt);
    const std::vector<float> g0 = grad->to_f32_vector();
    DeviceCopy g_grad = device_like(grad, offset);
    upload(g_grad, grad);
    update(c, step, param, grad, s1, s2);
    update(c, step, g_param.view, g_grad.view, g_s1.view, g_s2.view);
    struct Pair {
      const char* name;
      const Tensor* cpu;
      const Tensor* gpu;
    };
    const Tensor pc = param, s1c = s1.view(), s2c = s2.view();
    std::vector<Pair> pairs = {{"param", &pc, &g_param.view}};
    if (has_s1(c)) pairs.push_back({"state 1", &s1c, &g_s1.view});
    if (c.kind == Kind::AdamW) pairs.push_back({"v", &s2c, &g_s2.view});
    for (const Pair& pr : pairs) {
      const std::vector<uint16_t> want = bits_of(*pr.cpu), got = bits_of(*pr.gpu);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        if (!in_segment[i]) {
          if (pr.name[0] == 'p') {
            ASSERT_EQ(got[i], p_init[i]) << "the update wrote element " << i << " outside its segments";
          }
          continue;
        }
        const int64_t d = ulps(got[i], want[i]);
        if (d <= 1) {
          differ += d;
          continue;
        }
        const double gs = std::fabs(static_cast<double>(g0[i]) * grad_scale);
        const double m_terms = has_s1(c) ? std::fabs(beta1 * m0[i]) + gs : gs;
        if (c.kind == Kind::Lion && pr.name[0] == 'p') {
          // Lion: a direction within rounding of 0 may take the other sign: the parameters
          // then differ by 2 lr at most.
          const double cdir = beta1 * m0[i] + (1.0 - beta1) * gs * (g0[i] < 0 ? -1 : 1);
          if (std::fabs(cdir) <= 1e-5 * m_terms) {
            ASSERT_LE(std::fabs(f(got[i]) - f(want[i])), 2.5 * lr + std::fabs(f(want[i])) / 128.0) << i;
            continue;
          }
        }
        const double terms = pr.name[0] == 'p' ? std::fabs(p0[i]) + 10.0 * lr : m_terms + std::fabs(p0[i]);
        ASSERT_LE(std::fabs(f(got[i]) - f(want[i])), std::fabs(f(want[i])) / 128.0 + kF32 * terms)
            << pr.name << "[" << i << "] step " << step << ": gpu " << f(got[i]) << ", cpu " << f(want[i]) << " (" << d
            << " ulp)";
      }
    }
  }
  // Most values agree exactly.
  EXPECT_LE(differ, steps * 3 * n / 100 + 3);
}

void check_all(std::vector<OptCase> cases) {
  uint64_t seed = 1;
  const OptimizerSegments segs = odd_segments(5000);
  for (bool segmented : {false, true})
    for (OptCase c : cases) {
      if (segmented) {
        c.name += " (segmented)";
        c.segments = segs;
      }
      for (DType gdt : {DType::F32, DType::BF16, DType::F16})
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1000}, int64_t{4099}})
          for (int64_t offset : {0, 1}) check_case(c, gdt, n, offset, 3, seed += 20);
    }
}

TEST(CudaOptimizerBf16State, AdamWMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(4);
  cases[0].name = "AdamW decoupled decay, grad_scale 0.5";
  cases[0].adam.weight_decay = 0.1f;
  cases[0].adam.grad_scale = 0.5f;
  cases[1].name = "Adam L2 decay";
  cases[1].adam.decay = AdamDecay::L2;
  cases[1].adam.weight_decay = 0.05f;
  cases[1].adam.lr = 3e-3f;
  cases[2].name = "AdamW no bias correction";
  cases[2].adam.bias_correction = BiasCorrection::Off;
  cases[2].adam.lr = 1e-2f;
  cases[2].adam.beta2 = 0.95f;
  cases[3].name = "AdamW resumed at step 1000";
  cases[3].adam.weight_decay = 0.01f;
  cases[3].first_step = 1000;
  for (OptCase& c : cases) c.kind = Kind::AdamW;
  check_all(cases);
}

TEST(CudaOptimizerBf16State, SgdMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(3);
  cases[0].name = "SGD with L2 decay";
  cases[0].sgd.lr = 0.05f;
  cases[0].sgd.weight_decay = 0.1f;
  cases[1].name = "SGD Nesterov momentum";
  cases[1].sgd.lr = 0.02f;
  cases[1].sgd.momentum = 0.9f;
  cases[1].sgd.nesterov = Nesterov::On;
  cases[2].name = "SGD momentum with dampening";
  cases[2].sgd.lr = 0.03f;
  cases[2].sgd.momentum = 0.8f;
  cases[2].sgd.dampening = 0.3f;
  cases[2].sgd.grad_scale = 0.25f;
  for (OptCase& c : cases) c.kind = Kind::Sgd;
  check_all(cases);
}

TEST(CudaOptimizerBf16State, LionMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(2);
  cases[0].name = "Lion";
  cases[1].name = "Lion with decay";
  cases[1].lion.lr = 3e-4f;
  cases[1].lion.weight_decay = 0.1f;
  cases[1].lion.grad_scale = 0.5f;
  for (OptCase& c : cases) c.kind = Kind::Lion;
  check_all(cases);
}

// A range past one full grid of the kernel (grid-stride loop), bf16 gradients.
TEST(CudaOptimizerBf16State, LargeRangeTakesTheGridStrideLoop) {
  ZT_REQUIRE_GPU();
  OptCase c;
  c.name = "AdamW large range";
  c.kind = Kind::AdamW;
  c.adam.weight_decay = 0.1f;
  check_case(c, DType::BF16, int64_t{8192} * 256 * 8 + 3, 0, 2, 777);
}

}  // namespace
