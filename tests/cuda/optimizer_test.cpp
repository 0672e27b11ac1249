// CUDA optimizer updates (ops/optimizer.h on device tensors) against the CPU backend, over
// several steps: AdamW (decoupled and L2 decay, bias correction on and off, a resumed late
// step), SGD (plain, L2, momentum with dampening, Nesterov; the buffer is NaN before its
// first step, so reading it then would show), Lion (with and without decay). Every pair of
// parameter and gradient dtypes (f32/bf16/f16; 16-bit parameters with an f32 master, and an
// f32 parameter with a master too), sizes around the 8-element chunk, views shifted by one
// element (the unaligned path), and one range past a full grid of the kernel. The
// segmented updates (one call over a range cut into segments of different weight decay,
// with gaps left untouched) against the CPU's, with segments of odd lengths and offsets
// (chunks shared by two segments, edges inside a 16-byte vector) and more segments than
// one launch takes.
// Every value must be bitwise the CPU's: master, parameter (16-bit ones rounded from the
// master), moments, momentum buffer. The CUDA kernels spell out the CPU loops' roundings
// (backend/cuda/optimizer.cu), and ZeRO-Offload, which steps some units on the host and the
// rest here, relies on it. Lion's sign(c) then agrees too, even where c is within rounding of 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

// A device copy of a contiguous host tensor, `offset` elements past the start of its own
// (256-byte aligned) allocation: offset 1 misaligns every 16-byte vector. An undefined host
// tensor gives an undefined device tensor.
struct DeviceCopy {
  OwnedTensor storage;
  Tensor view;
  operator const Tensor&() const { return view; }
};
DeviceCopy on_device(const Tensor& host, int64_t offset = 0) {
  DeviceCopy d;
  if (host.data() == nullptr) return d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* base = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(dtype_size(host.dtype()));
  cuda::copy_to_device(base, host.data(), host.nbytes());
  d.view = Tensor(base, host.shape(), host.dtype(), Device::cuda(), host.name());
  return d;
}
std::vector<float> values(const Tensor& t) {
  return t.device().is_cuda() ? to_host(t)->to_f32_vector() : t.to_f32_vector();
}

// Uniform noise in [-scale, scale) from xorshift64: cheap enough for ranges of millions.
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

// The number of elements whose bits differ (NaN and -0 count as their bits); the first
// few are reported.
int64_t bitwise_mismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int64_t differ = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (++differ <= 3) ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i];
  }
  return differ;
}

enum class Kind { AdamW, Sgd, Lion };

struct OptCase {
  std::string name;
  Kind kind;
  AdamWHyper adam{};
  SgdHyper sgd{};
  LionHyper lion{};
  int64_t first_step = 1;  // AdamW: the step count of the first update (a resumed run starts late)
  // Non-empty: the segmented update over these segments (its weight decays replace the
  // hyper-parameters'); they must fit the sizes the case runs at (see fit()).
  OptimizerSegments segments;
};

// The case's segments cut to a range of n elements.
OptimizerSegments fit(const OptimizerSegments& segs, int64_t n) {
  OptimizerSegments out;
  for (const OptimizerSegment& s : segs) {
    if (s.offset >= n) break;
    out.push_back({s.offset, std::min(s.length, n - s.offset), s.weight_decay});
  }
  return out;
}

// Segments of cycling lengths (1 to 2000, many not multiples of 8), gaps (none, a few
// elements, a whole 64-element alignment block) and weight decays, up to `limit` elements.
OptimizerSegments odd_segments(int64_t limit, const std::vector<int64_t>& lengths) {
  const int64_t gaps[] = {0, 0, 3, 0, 5, 0, 64, 1, 0};
  const float decays[] = {0.1f, 0.0f, 0.05f, 0.2f, 0.0f};
  OptimizerSegments out;
  int64_t pos = 0;
  for (size_t i = 0;; ++i) {
    pos += gaps[i % 9];
    if (pos >= limit) break;
    const int64_t len = std::min(lengths[i % lengths.size()], limit - pos);
    out.push_back({pos, len, decays[i % 5]});
    pos += len;
  }
  return out;
}

bool uses_first_state(const OptCase& c) { return c.kind != Kind::Sgd || c.sgd.momentum != 0.0f; }

// One update of the case at `step` (1-based within the run).
void update(const OptCase& c, int64_t step, const Tensor& param, const Tensor& master, const Tensor& grad,
            const Tensor& s1, const Tensor& s2) {
  const bool segmented = !c.segments.empty();
  const OptimizerSegments segs = fit(c.segments, param.numel());
  switch (c.kind) {
    case Kind::AdamW: {
      AdamWHyper h = c.adam;
      h.step = c.first_step + step - 1;
      if (segmented)
        ops::adamw_step_segments(param, master, grad, s1, s2, h, segs);
      else
        ops::adamw_step(param, master, grad, s1, s2, h);
      return;
    }
    case Kind::Sgd: {
      SgdHyper h = c.sgd;
      h.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
      const Tensor buf = uses_first_state(c) ? s1 : Tensor();
      if (segmented)
        ops::sgd_step_segments(param, master, grad, buf, h, segs);
      else
        ops::sgd_step(param, master, grad, buf, h);
      return;
    }
    case Kind::Lion:
      if (segmented)
        ops::lion_step_segments(param, master, grad, s1, c.lion, segs);
      else
        ops::lion_step(param, master, grad, s1, c.lion);
      return;
  }
}

void check_case(const OptCase& c, DType pdt, DType gdt, int64_t n, int64_t offset, bool f32_master, int steps,
                uint64_t seed) {
  SCOPED_TRACE(str(c.name, ": param ", dtype_name(pdt), " grad ", dtype_name(gdt), " n=", n, " offset=", offset,
                   f32_master ? " (f32 param with master)" : ""));
  const bool has_master = pdt != DType::F32 || f32_master;
  const std::vector<float> p0 = noise(n, seed, 1.0f);
  const OwnedTensor param = make(p0, {n}, pdt);
  const OwnedTensor master = has_master ? make(p0, {n}) : OwnedTensor();
  OwnedTensor s1, s2;
  if (uses_first_state(c)) {
    // SGD's buffer holds garbage before its first step: NaN, so that reading it would show.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Gaps between segments are never updated: there the buffer holds a finite value, which
    // must survive.
    std::vector<float> b(static_cast<size_t>(n), c.segments.empty() ? nan : 0.25f);
    for (const OptimizerSegment& sg : fit(c.segments, n))
      std::fill(b.begin() + sg.offset, b.begin() + sg.offset + sg.length, nan);
    s1 = c.kind == Kind::Sgd ? make(b, {n}) : make(noise(n, seed + 1, 0.01f), {n});
  }
  if (c.kind == Kind::AdamW) {
    std::vector<float> v = noise(n, seed + 2, 1e-2f);
    for (float& x : v) x = x * x;
    s2 = make(v, {n});
  }
  const DeviceCopy g_param = on_device(param, offset), g_master = on_device(master, offset),
                   g_s1 = on_device(s1, offset), g_s2 = on_device(s2, offset);

  for (int step = 1; step <= steps; ++step) {
    const OwnedTensor grad = make(noise(n, seed + 10 + static_cast<uint64_t>(step), 1.0f), {n}, gdt);
    const DeviceCopy g_grad = on_device(grad, offset);
    update(c, step, param, master, grad, s1, s2);
    update(c, step, g_param, g_master, g_grad, g_s1, g_s2);
  }
  if (!c.segments.empty()) {
    // Elements in no segment kept their initial values on the GPU (the CPU comparison
    // below covers the rest).
    std::vector<char> in_segment(static_cast<size_t>(n), 0);
    for (const OptimizerSegment& sg : fit(c.segments, n))
      std::fill(in_segment.begin() + sg.offset, in_segment.begin() + sg.offset + sg.length, 1);
    const std::vector<float> gp = values(g_param), p_init = make(p0, {n}, pdt)->to_f32_vector();
    int64_t changed = 0;
    for (int64_t i = 0; i < n; ++i)
      if (!in_segment[static_cast<size_t>(i)]) changed += gp[static_cast<size_t>(i)] != p_init[static_cast<size_t>(i)];
    EXPECT_EQ(changed, 0) << "the update wrote elements outside its segments";
  }
  if (has_master) {
    EXPECT_EQ(bitwise_mismatches(values(g_master), values(master), "master"), 0);
  }
  EXPECT_EQ(bitwise_mismatches(values(g_param), values(param), "param"), 0);
  if (pdt != DType::F32) {
    EXPECT_EQ(values(g_param), make(values(g_master), {n}, pdt)->to_f32_vector()) << "param is not its master rounded";
  }
  if (uses_first_state(c)) {
    EXPECT_EQ(bitwise_mismatches(values(g_s1), values(s1), "first state (m / buffer)"), 0);
  }
  if (c.kind == Kind::AdamW) {
    EXPECT_EQ(bitwise_mismatches(values(g_s2), values(s2), "v"), 0);
  }
}

const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};
const std::vector<int64_t> kSizes = {1, 7, 8, 9, 1000, 4099};

void check_all(const std::vector<OptCase>& cases) {
  uint64_t seed = 1;
  for (const OptCase& c : cases)
    for (DType pdt : kFloatTypes)
      for (DType gdt : kFloatTypes)
        for (int64_t n : kSizes)
          for (int64_t offset : {0, 1}) check_case(c, pdt, gdt, n, offset, false, 4, seed += 20);
  // An f32 parameter that also has an f32 master copy.
  for (const OptCase& c : cases) check_case(c, DType::F32, DType::BF16, 1003, 0, true, 3, seed += 20);
}

// The cases again as segmented updates over odd segments, at sizes that end inside a
// segment or a gap, aligned and misaligned.
void check_all_segmented(std::vector<OptCase> cases) {
  const OptimizerSegments segs = odd_segments(5000, {1, 7, 8, 9, 13, 64, 100, 3, 1000, 5, 2000, 17});
  uint64_t seed = 5000;
  for (OptCase& c : cases) {
    c.name += " (segmented)";
    c.segments = segs;
    for (DType pdt : kFloatTypes)
      for (DType gdt : kFloatTypes)
        for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{1000}, int64_t{4099}})
          for (int64_t offset : {0, 1}) check_case(c, pdt, gdt, n, offset, false, 3, seed += 20);
  }
  for (OptCase& c : cases) check_case(c, DType::F32, DType::BF16, 1003, 0, true, 3, seed += 20);
}

TEST(CudaOptimizer, AdamWMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(4);
  cases[0].name = "AdamW decoupled decay, grad_scale 0.5";
  cases[0].adam.weight_decay = 0.1f;
  cases[0].adam.grad_scale = 0.5f;
  cases[1].name = "Adam L2 decay";
  cases[1].adam.decay = AdamDecay::L2;
  cases[1].adam.weight_decay = 0.05f;
  cases[1].adam.lr = 3e-3f;
  cases[2].name = "AdamW no bias correction, loss-scaled gradients";
  cases[2].adam.bias_correction = BiasCorrection::Off;
  cases[2].adam.lr = 1e-2f;
  cases[2].adam.grad_scale = 1.0f / 1024.0f;
  cases[2].adam.beta2 = 0.95f;
  cases[3].name = "AdamW resumed at step 1000";
  cases[3].adam.weight_decay = 0.01f;
  cases[3].adam.eps = 1e-6f;
  cases[3].first_step = 1000;
  for (OptCase& c : cases) c.kind = Kind::AdamW;
  check_all(cases);
  check_all_segmented(cases);
}

TEST(CudaOptimizer, SgdMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(4);
  cases[0].name = "SGD";
  cases[0].sgd.lr = 0.05f;
  cases[1].name = "SGD with L2 decay";
  cases[1].sgd.lr = 0.05f;
  cases[1].sgd.weight_decay = 0.1f;
  cases[2].name = "SGD Nesterov momentum";
  cases[2].sgd.lr = 0.02f;
  cases[2].sgd.momentum = 0.9f;
  cases[2].sgd.weight_decay = 0.01f;
  cases[2].sgd.nesterov = Nesterov::On;
  cases[3].name = "SGD momentum with dampening";
  cases[3].sgd.lr = 0.03f;
  cases[3].sgd.momentum = 0.8f;
  cases[3].sgd.dampening = 0.3f;
  cases[3].sgd.grad_scale = 0.25f;
  for (OptCase& c : cases) c.kind = Kind::Sgd;
  check_all(cases);
  check_all_segmented(cases);
}

TEST(CudaOptimizer, LionMatchesCpu) {
  ZT_REQUIRE_GPU();
  std::vector<OptCase> cases(2);
  cases[0].name = "Lion";
  cases[1].name = "Lion with decay";
  cases[1].lion.lr = 3e-4f;
  cases[1].lion.weight_decay = 0.1f;
  cases[1].lion.beta1 = 0.95f;
  cases[1].lion.beta2 = 0.98f;
  cases[1].lion.grad_scale = 0.5f;
  for (OptCase& c : cases) c.kind = Kind::Lion;
  check_all(cases);
  check_all_segmented(cases);
}

// A range larger than one grid of the kernel (8192 blocks x 256 threads x 8 elements) and
// than a GPT-2 small block (7.1M parameters): bf16 parameters, f32 master, bf16 gradients.
TEST(CudaOptimizer, LargeRangeTakesTheGridStrideLoop) {
  ZT_REQUIRE_GPU();
  OptCase c;
  c.name = "AdamW large range";
  c.kind = Kind::AdamW;
  c.adam.weight_decay = 0.1f;
  check_case(c, DType::BF16, DType::BF16, int64_t{8192} * 256 * 8 + 3, 0, false, 2, 777);
}

// More segments than one launch's table holds (64): the update takes several launches,
// for each optimizer; segments of 1-40 elements, and one large segment past a full grid.
TEST(CudaOptimizer, ManySegmentsTakeSeveralLaunches) {
  ZT_REQUIRE_GPU();
  const OptimizerSegments small = odd_segments(6000, {1, 7, 8, 9, 13, 40, 3, 16, 5, 31});
  ASSERT_GT(small.size(), 3u * 64u);
  std::vector<OptCase> cases(3);
  cases[0].name = "AdamW, 64+ segments";
  cases[0].kind = Kind::AdamW;
  cases[1].name = "SGD momentum, 64+ segments";
  cases[1].kind = Kind::Sgd;
  cases[1].sgd.lr = 0.02f;
  cases[1].sgd.momentum = 0.9f;
  cases[2].name = "Lion, 64+ segments";
  cases[2].kind = Kind::Lion;
  cases[2].lion.lr = 3e-4f;
  uint64_t seed = 9000;
  for (OptCase& c : cases) {
    c.segments = small;
    for (int64_t offset : {0, 1}) check_case(c, DType::BF16, DType::BF16, 6000, offset, false, 3, seed += 20);
    check_case(c, DType::F32, DType::F32, 5999, 0, false, 2, seed += 20);
  }
  OptCase big;
  big.name = "AdamW large segmented range";
  big.kind = Kind::AdamW;
  const int64_t n = int64_t{8192} * 256 * 8 + 3;
  big.segments = {{0, 3, 0.0f}, {3, 100, 0.1f}, {128, n - 128 - 9, 0.1f}, {n - 9, 9, 0.0f}};
  check_case(big, DType::BF16, DType::BF16, n, 0, false, 2, 778);
}

}  // namespace
