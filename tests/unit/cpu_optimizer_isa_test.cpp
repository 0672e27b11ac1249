// The CPU optimizer kernels' two instruction-set paths (backend/cpu/optimizer_isa.h) give
// bitwise the same parameters, master weights and state: AdamW (decoupled and L2), SGD
// (plain, momentum with dampening, Nesterov) and Lion, for f32 / bf16+master / f16+master /
// pure-bf16 storage and f32 / bf16 / f16 gradients, over lengths that leave vector tails
// and over segmented ranges whose gaps stay untouched. Bitwise, not within an ulp: both paths
// are the same source (backend/cpu/optimizer_loops.h) with every fused multiply-add written
// out and contraction off, and add, multiply, divide, sqrt, fma and the conversions round
// the same at any vector width. Inputs include NaN, inf, signed zeros, subnormals and
// values beyond f16's range, so the conversions' edge cases are compared too.
// Also: the segmented update gives the same bits at any thread count (the per-thread split
// of the segments covers every element once), and ZT_CPU_ISA's rule.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/optimizer_isa.h"
#include "core/dtype.h"
#include "ops/optimizer.h"

using namespace zt;
using zt::cpu::OptimizerIsa;

namespace {

// Restores the process's instruction-set choice when a test ends.
class IsaRestorer {
 public:
  IsaRestorer() : saved_(cpu::optimizer_isa()) {}
  ~IsaRestorer() { cpu::set_optimizer_isa(saved_); }

 private:
  OptimizerIsa saved_;
};

enum class Opt { AdamW, AdamL2, Sgd, SgdMomentum, SgdNesterov, Lion };
// f32: no master; Bf16Master / F16Master: 16-bit parameter and f32 master and state;
// PureBf16: bf16 parameter and state, no master.
enum class Storage { F32, Bf16Master, F16Master, PureBf16 };

const char* opt_name(Opt o) {
  switch (o) {
    case Opt::AdamW:
      return "AdamW";
    case Opt::AdamL2:
      return "Adam-L2";
    case Opt::Sgd:
      return "SGD";
    case Opt::SgdMomentum:
      return "SGD-momentum";
    case Opt::SgdNesterov:
      return "SGD-Nesterov";
    case Opt::Lion:
      return "Lion";
  }
  return "?";
}

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::F32:
      return "f32";
    case Storage::Bf16Master:
      return "bf16+master";
    case Storage::F16Master:
      return "f16+master";
    case Storage::PureBf16:
      return "pure-bf16";
  }
  return "?";
}

// Deterministic values: mostly in [-1, 1), with every few hundred elements an edge case.
std::vector<float> make_values(int64_t n, uint64_t seed, bool non_negative) {
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  const float specials[] = {0.0f,  -0.0f,  std::numeric_limits<float>::infinity(),  -1e-40f,  3e-7f,   7e4f, -66000.0f,
                            1e30f, -1e-6f, std::numeric_limits<float>::quiet_NaN(), 65504.0f, 1.5e-45f};
  for (float& v : out) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float u = static_cast<float>((s >> 11) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
    v = (s >> 40) % 97 == 0 ? specials[(s >> 50) % (sizeof specials / sizeof specials[0])] : u;
    if (non_negative) v = std::fabs(v) * 0.01f;
  }
  return out;
}

OwnedTensor make_tensor(int64_t n, DType dtype, uint64_t seed, bool non_negative = false) {
  OwnedTensor t({n}, dtype);
  const std::vector<float> v = make_values(n, seed, non_negative);
  convert(v.data(), DType::F32, t->data(), dtype, static_cast<size_t>(n));
  return t;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  if (!t.data()) return {};
  const auto* p = static_cast<const unsigned char*>(t.data());
  return std::vector<unsigned char>(p, p + t.nbytes());
}

// Whether element i has the same bytes in both tensors (true for two undefined ones).
bool same_element(const Tensor& a, const Tensor& b, int64_t i) {
  if (!a.data()) return !b.data();
  const size_t size = dtype_size(a.dtype());
  return std::memcmp(static_cast<const char*>(a.data()) + static_cast<size_t>(i) * size,
                     static_cast<const char*>(b.data()) + static_cast<size_t>(i) * size, size) == 0;
}

// Parameter, master, gradient and state of one case, all from fixed seeds.
struct Buffers {
  OwnedTensor param, master, grad, s1, s2;

  Buffers(int64_t n, Storage storage, DType grad_dtype) {
    const DType pdt = storage == Storage::F32 ? DType::F32 : storage == Storage::F16Master ? DType::F16 : DType::BF16;
    const DType sdt = storage == Storage::PureBf16 ? DType::BF16 : DType::F32;
    param = make_tensor(n, pdt, 1);
    if (storage == Storage::Bf16Master || storage == Storage::F16Master) master = make_tensor(n, DType::F32, 2);
    grad = make_tensor(n, grad_dtype, 3);
    s1 = make_tensor(n, sdt, 4);
    s2 = make_tensor(n, sdt, 5, /*non_negative=*/true);
  }
  Tensor master_or_none() const { return master.view().data() ? master.view() : Tensor(); }

  std::vector<unsigned char> all_bytes() const {
    std::vector<unsigned char> out;
    for (const Tensor* t : {&param.view(), &master.view(), &s1.view(), &s2.view()}) {
      const std::vector<unsigned char> b = bytes_of(*t);
      out.insert(out.end(), b.begin(), b.end());
    }
    return out;
  }
};

// Three steps of `opt` over the buffers: one segmented call per step when `segs` is given,
// else one call over the whole range with weight decay 0.05.
void run_steps(Opt opt, const Buffers& b, const OptimizerSegments* segs) {
  for (int64_t step = 1; step <= 3; ++step) {
    const float grad_scale = 0.37f;  // not a power of two: products round
    switch (opt) {
      case Opt::AdamW:
      case Opt::AdamL2: {
        ops::AdamWHyper h;
        h.lr = 1e-2f;
        h.step = step;
        h.grad_scale = grad_scale;
        h.weight_decay = 0.05f;
        h.decay = opt == Opt::AdamL2 ? AdamDecay::L2 : AdamDecay::Decoupled;
        if (segs) {
          ops::adamw_step_segments(b.param, b.master_or_none(), b.grad, b.s1, b.s2, h, *segs);
        } else {
          ops::adamw_step(b.param, b.master_or_none(), b.grad, b.s1, b.s2, h);
        }
        break;
      }
      case Opt::Sgd:
      case Opt::SgdMomentum:
      case Opt::SgdNesterov: {
        ops::SgdHyper h;
        h.lr = 0.05f;
        h.grad_scale = grad_scale;
        h.weight_decay = 0.05f;
        if (opt != Opt::Sgd) {
          h.momentum = 0.9f;
          h.dampening = opt == Opt::SgdMomentum ? 0.1f : 0.0f;
          h.nesterov = opt == Opt::SgdNesterov ? Nesterov::On : Nesterov::Off;
          h.buffer = step == 1 ? MomentumBuffer::Empty : MomentumBuffer::Filled;
        }
        const Tensor buf = opt == Opt::Sgd ? Tensor() : b.s1.view();
        if (segs) {
          ops::sgd_step_segments(b.param, b.master_or_none(), b.grad, buf, h, *segs);
        } else {
          ops::sgd_step(b.param, b.master_or_none(), b.grad, buf, h);
        }
        break;
      }
      case Opt::Lion: {
        ops::LionHyper h;
        h.lr = 3e-3f;
        h.grad_scale = grad_scale;
        h.weight_decay = 0.05f;
        if (segs) {
          ops::lion_step_segments(b.param, b.master_or_none(), b.grad, b.s1, h, *segs);
        } else {
          ops::lion_step(b.param, b.master_or_none(), b.grad, b.s1, h);
        }
        break;
      }
    }
  }
}

// Segments with odd offsets and lengths, gaps, weight decays that differ (0 among them:
// no L2 / decay term), one above the kernels' single-thread cutoff, and many small ones.
OptimizerSegments mixed_segments(int64_t* total) {
  OptimizerSegments segs = {{0, 1, 0.1f},      {3, 7, 0.0f},        {16, 1000, 0.2f}, {1016, 15, 0.0f},
                            {1040, 17, 0.05f}, {1100, 40001, 0.1f}, {41101, 9, 0.0f}};
  int64_t at = 41200;
  for (int k = 0; k < 40; ++k) {
    segs.push_back({at, 33 + k, k % 3 == 0 ? 0.0f : 0.01f * static_cast<float>(k)});
    at += 33 + k + (k % 4);  // gaps of 0 to 3 elements
  }
  *total = at + 5;
  return segs;
}

struct Case {
  Opt opt;
  Storage storage;
  DType grad;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Opt o : {Opt::AdamW, Opt::AdamL2, Opt::Sgd, Opt::SgdMomentum, Opt::SgdNesterov, Opt::Lion})
    for (Storage s : {Storage::F32, Storage::Bf16Master, Storage::F16Master, Storage::PureBf16})
      for (DType g : {DType::F32, DType::BF16, DType::F16}) out.push_back({o, s, g});
  return out;
}

std::string case_name(const Case& c, const std::string& range) {
  return std::string(opt_name(c.opt)) + " " + storage_name(c.storage) + " grad " + dtype_name(c.grad) + " " + range;
}

// The buffers' bytes after three steps on `isa`.
std::vector<unsigned char> result_on(OptimizerIsa isa, const Case& c, int64_t n, const OptimizerSegments* segs) {
  EXPECT_TRUE(cpu::set_optimizer_isa(isa));
  Buffers b(n, c.storage, c.grad);
  run_steps(c.opt, b, segs);
  return b.all_bytes();
}

bool skip_without_avx512() { return !cpu::optimizer_isa_supported(OptimizerIsa::Avx512); }

}  // namespace

TEST(CpuOptimizerIsa, Avx2AndAvx512AgreeBitwiseOnSingleRanges) {
  if (skip_without_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  IsaRestorer restore;
  for (const Case& c : all_cases())
    for (int64_t n : {1, 7, 15, 17, 1000, 100003}) {
      const std::string name = case_name(c, "n=" + std::to_string(n));
      SCOPED_TRACE(name);
      const std::vector<unsigned char> avx2 = result_on(OptimizerIsa::Avx2, c, n, nullptr);
      const std::vector<unsigned char> avx512 = result_on(OptimizerIsa::Avx512, c, n, nullptr);
      ASSERT_EQ(avx2.size(), avx512.size());
      ASSERT_TRUE(avx2 == avx512) << name;
    }
}

TEST(CpuOptimizerIsa, Avx2AndAvx512AgreeBitwiseOnSegmentsAndLeaveGaps) {
  if (skip_without_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  IsaRestorer restore;
  int64_t n = 0;
  const OptimizerSegments segs = mixed_segments(&n);
  std::vector<char> in_segment(static_cast<size_t>(n), 0);
  for (const OptimizerSegment& s : segs)
    for (int64_t i = s.offset; i < s.offset + s.length; ++i) in_segment[static_cast<size_t>(i)] = 1;
  for (const Case& c : all_cases()) {
    const std::string name = case_name(c, "segments");
    SCOPED_TRACE(name);
    for (OptimizerIsa isa : {OptimizerIsa::Avx2, OptimizerIsa::Avx512}) {
      ASSERT_TRUE(cpu::set_optimizer_isa(isa));
      Buffers b(n, c.storage, c.grad);
      const Buffers before(n, c.storage, c.grad);
      run_steps(c.opt, b, &segs);
      // Gaps keep every byte of every buffer; most segment elements move.
      int64_t moved = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool param_same = same_element(b.param, before.param, i);
        if (in_segment[static_cast<size_t>(i)]) {
          moved += !param_same;
          continue;
        }
        ASSERT_TRUE(param_same && same_element(b.master, before.master, i) && same_element(b.s1, before.s1, i) &&
                    same_element(b.s2, before.s2, i))
            << cpu::optimizer_isa_name(isa) << " gap element " << i;
      }
      EXPECT_GT(moved, n / 2) << cpu::optimizer_isa_name(isa);
    }
    const std::vector<unsigned char> avx2 = result_on(OptimizerIsa::Avx2, c, n, &segs);
    const std::vector<unsigned char> avx512 = result_on(OptimizerIsa::Avx512, c, n, &segs);
    ASSERT_TRUE(avx2 == avx512) << name;
  }
}

TEST(CpuOptimizerIsa, SegmentedUpdateIsTheSameAtAnyThreadCount) {
  // Each thread takes a contiguous share of the segments laid end to end, cut inside
  // segments too; any split must update every element exactly once.
  IsaRestorer restore;
  const int saved_threads = omp_get_max_threads();
  int64_t n = 0;
  const OptimizerSegments segs = mixed_segments(&n);
  for (OptimizerIsa isa : {OptimizerIsa::Avx2, OptimizerIsa::Avx512}) {
    if (!cpu::optimizer_isa_supported(isa)) continue;
    for (const Case c :
         {Case{Opt::AdamW, Storage::Bf16Master, DType::BF16}, Case{Opt::SgdNesterov, Storage::F32, DType::F16},
          Case{Opt::Lion, Storage::PureBf16, DType::F32}}) {
      SCOPED_TRACE(case_name(c, cpu::optimizer_isa_name(isa)));
      omp_set_num_threads(1);
      const std::vector<unsigned char> one = result_on(isa, c, n, &segs);
      for (int threads : {2, 3, 5, 16}) {
        omp_set_num_threads(threads);
        EXPECT_TRUE(result_on(isa, c, n, &segs) == one) << threads << " threads";
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST(CpuOptimizerIsa, ChoiceFollowsTheRequestAndTheCpu) {
  using cpu::resolve_optimizer_isa;
  EXPECT_EQ(resolve_optimizer_isa(nullptr, true), OptimizerIsa::Avx512);
  EXPECT_EQ(resolve_optimizer_isa(nullptr, false), OptimizerIsa::Avx2);
  EXPECT_EQ(resolve_optimizer_isa("auto", true), OptimizerIsa::Avx512);
  EXPECT_EQ(resolve_optimizer_isa("avx2", true), OptimizerIsa::Avx2);
  EXPECT_EQ(resolve_optimizer_isa("avx512", true), OptimizerIsa::Avx512);
  // A request the CPU cannot run falls back instead of failing.
  EXPECT_EQ(resolve_optimizer_isa("avx512", false), OptimizerIsa::Avx2);
  EXPECT_EQ(resolve_optimizer_isa("sse2", true), OptimizerIsa::Avx512);

  IsaRestorer restore;
  ASSERT_TRUE(cpu::set_optimizer_isa(OptimizerIsa::Avx2));
  EXPECT_STREQ(cpu::cpu_optimizer_isa(), "avx2");
  if (cpu::optimizer_isa_supported(OptimizerIsa::Avx512)) {
    ASSERT_TRUE(cpu::set_optimizer_isa(OptimizerIsa::Avx512));
    EXPECT_STREQ(cpu::cpu_optimizer_isa(), "avx512");
  } else {
    EXPECT_FALSE(cpu::set_optimizer_isa(OptimizerIsa::Avx512));
    EXPECT_STREQ(cpu::cpu_optimizer_isa(), "avx2");
  }
}
