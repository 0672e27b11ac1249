// The CPU optimizer loops, written once and compiled once per instruction set: a unit
// defines ZT_CPU_OPT_ISA (the namespace: avx2, avx512) and ZT_CPU_OPT_AVX512, includes this
// file and instantiates the entry points (optimizer_avx2.cpp, optimizer_avx512.cpp).
// optimizer.cpp picks the unit at run time (optimizer_isa.h).
//
// The arithmetic is PyTorch's single-tensor update, operation by operation, with the
// rounding points of the scalar loops these replaced: each multiply-add that the compiler
// fused there is an explicit fma() here (the units are compiled with -ffp-contract=off, so
// nothing else is fused). The results are then bitwise equal across the instruction sets
// and compilers, whatever their contraction heuristics. Every branch that does not depend
// on the element (master weights, L2 decay, momentum, Nesterov) is a template parameter, so
// each loop body is straight-line vector code. A range's last n % kWidth elements go through the same vector body on a
// copy padded with zeros, so they are computed exactly as the others.
#pragma once
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "backend/cpu/optimizer_simd.h"

namespace zt::cpu::ZT_CPU_OPT_ISA {

// Ranges of at most this many elements run on one thread: starting the others costs more
// than the update.
constexpr int64_t kParallelMin = 32768;
// Threads split a range at element offsets that are multiples of this within a segment:
// whole vectors of either width, and whole 64-byte lines of f32 state where the segment is
// aligned.
constexpr int64_t kSplitAlign = 16;

// The arrays of one update. Optimizers use a subset: master is null when the parameter
// holds the weights itself; state1/state2 are Adam's m and v, SGD's momentum buffer (null
// without momentum), Lion's m.
template <class P, class G, class S>
struct Arrays {
  P* param;
  float* master;
  const G* grad;
  S* state1;
  S* state2;

  Arrays at(int64_t i) const {
    return {param + i, master ? master + i : nullptr, grad + i, state1 ? state1 + i : nullptr,
            state2 ? state2 + i : nullptr};
  }
};

// The weights as f32: the master copy, or the parameter itself.
template <bool kMaster, class P>
inline VecF load_weights(const P* param, const float* master) {
  if constexpr (kMaster) return load(master);
  return load(param);
}
template <bool kMaster, class P>
inline void store_weights(P* param, float* master, VecF p) {
  if constexpr (kMaster) store(master, p);
  store(param, p);  // the 16-bit parameter is written in the same pass
}

// --- the per-vector updates: one kWidth-element step at the arrays' start -------------
// Each holds its factors already broadcast: GCC does not hoist the broadcast of a scalar
// operand out of the loop by itself, and would redo it every iteration.

// torch.optim.AdamW / Adam (weight decay decoupled, or L2 added to the gradient).
template <class P, class G, class S, bool kMaster, bool kL2>
struct AdamWUpdate {
  VecF b1, one_minus_b1, b2, one_minus_b2, neg_step_size, bc2_sqrt, eps, grad_scale, decay, l2;

  AdamWUpdate(float beta1, float beta2, float step_size, float bias_correction2_sqrt, float epsilon, float scale,
              float decay_factor, float l2_decay)
      : b1(splat(beta1)),
        one_minus_b1(splat(1.0f - beta1)),
        b2(splat(beta2)),
        one_minus_b2(splat(1.0f - beta2)),
        neg_step_size(splat(-step_size)),
        bc2_sqrt(splat(bias_correction2_sqrt)),
        eps(splat(epsilon)),
        grad_scale(splat(scale)),
        decay(splat(decay_factor)),
        l2(splat(l2_decay)) {}

  void operator()(const Arrays<P, G, S>& a) const {
    VecF p = load_weights<kMaster>(a.param, a.master);
    VecF g = load(a.grad) * grad_scale;
    if constexpr (kL2) g = fma(l2, p, g);  // torch: grad.add(param, alpha=wd)
    p *= decay;
    const VecF mi = fma(b1, load(a.state1), one_minus_b1 * g);
    const VecF vi = fma(b2, load(a.state2), one_minus_b2 * g * g);
    store(a.state1, mi);
    store(a.state2, vi);
    p = fma(neg_step_size, mi / (sqrt(vi) / bc2_sqrt + eps), p);
    store_weights<kMaster>(a.param, a.master, p);
  }
};

// torch.optim.SGD: d = g + wd*p; buf = d on the first step, else momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; p -= lr*d.
enum class Momentum { None, FirstStep, Running };

template <class P, class G, class S, bool kMaster, bool kDecay, Momentum kMomentum, bool kNesterov>
struct SgdUpdate {
  VecF mu, keep, wd, neg_lr, grad_scale;

  SgdUpdate(float momentum, float dampening, float weight_decay, float lr, float scale)
      : mu(splat(momentum)),
        keep(splat(1.0f - dampening)),
        wd(splat(weight_decay)),
        neg_lr(splat(-lr)),
        grad_scale(splat(scale)) {}

  void operator()(const Arrays<P, G, S>& a) const {
    VecF p = load_weights<kMaster>(a.param, a.master);
    VecF d = load(a.grad) * grad_scale;
    if constexpr (kDecay) d = fma(wd, p, d);
    if constexpr (kMomentum != Momentum::None) {
      VecF b;
      if constexpr (kMomentum == Momentum::FirstStep) {
        b = d;
      } else {
        b = fma(mu, load(a.state1), keep * d);
      }
      store(a.state1, b);
      if constexpr (kNesterov) {
        d = fma(mu, b, d);
      } else {
        d = b;
      }
    }
    p = fma(neg_lr, d, p);
    store_weights<kMaster>(a.param, a.master, p);
  }
};

// Lion (Chen et al. 2023, as lucidrains/lion-pytorch and DeepSpeed's FusedLion):
// p *= 1 - lr*wd; p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g. sign(0) = sign(NaN) = 0.
template <class P, class G, class S, bool kMaster>
struct LionUpdate {
  VecF b1, one_minus_b1, b2, one_minus_b2, neg_lr, grad_scale, decay;

  LionUpdate(float beta1, float beta2, float lr, float scale, float decay_factor)
      : b1(splat(beta1)),
        one_minus_b1(splat(1.0f - beta1)),
        b2(splat(beta2)),
        one_minus_b2(splat(1.0f - beta2)),
        neg_lr(splat(-lr)),
        grad_scale(splat(scale)),
        decay(splat(decay_factor)) {}

  void operator()(const Arrays<P, G, S>& a) const {
    VecF p = load_weights<kMaster>(a.param, a.master);
    const VecF g = load(a.grad) * grad_scale;
    p *= decay;
    const VecF mi = load(a.state1);
    const VecF c = fma(b1, mi, one_minus_b1 * g);
    const VecF s = c > 0.0f ? splat(1.0f) : (c < 0.0f ? splat(-1.0f) : splat(0.0f));
    p = fma(neg_lr, s, p);  // lr*s is exact: the same as p - lr*s rounded once
    store(a.state1, fma(b2, mi, one_minus_b2 * g));
    store_weights<kMaster>(a.param, a.master, p);
  }
};

// --- one contiguous range ---------------------------------------------------------------

template <class T>
inline void copy_some(T* dst, const T* src, int64_t n) {
  if (src != nullptr) std::memcpy(static_cast<void*>(dst), src, static_cast<size_t>(n) * sizeof(T));
}

// The last n < kWidth elements: copied into zero-padded vectors, updated, copied back (the
// elements after them, gaps between segments included, are never written).
template <class Update, class P, class G, class S>
void update_tail(const Update& update, const Arrays<P, G, S>& a, int64_t n) {
  P param[kWidth] = {};
  float master[kWidth] = {};
  G grad[kWidth] = {};
  S state1[kWidth] = {}, state2[kWidth] = {};
  copy_some(param, a.param, n);
  copy_some(master, a.master, n);
  copy_some(grad, a.grad, n);
  copy_some(state1, a.state1, n);
  copy_some(state2, a.state2, n);
  update({param, a.master ? master : nullptr, grad, a.state1 ? state1 : nullptr, a.state2 ? state2 : nullptr});
  copy_some(a.param, param, n);
  if (a.master) copy_some(a.master, master, n);
  if (a.state1) copy_some(a.state1, state1, n);
  if (a.state2) copy_some(a.state2, state2, n);
}

template <class Update, class P, class G, class S>
void update_range(const Update& update, const Arrays<P, G, S>& a, int64_t n) {
  // A copy whose address never escapes: the compiler then knows the array stores cannot
  // change its factors, and keeps them in registers across the loop.
  const Update local = update;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) local(a.at(i));
  if (i < n) update_tail(update, a.at(i), n - i);
}

// --- segments and threads -------------------------------------------------------------

// An element of a segmented range: the segment's index and the offset inside it.
struct SegmentPosition {
  size_t segment;
  int64_t offset;
};

// Where the element `index` of the segments laid end to end falls, its offset rounded down
// to kSplitAlign; index == total gives the end.
inline SegmentPosition locate(const OptimizerSegment* segs, size_t count, int64_t index) {
  for (size_t k = 0; k < count; ++k) {
    if (index < segs[k].length) return {k, index / kSplitAlign * kSplitAlign};
    index -= segs[k].length;
  }
  return {count, 0};
}

// Calls piece(segment, begin, end) for parts [begin, end) of the segments, each element
// once. Above kParallelMin elements in all, one parallel region: the segments laid end to
// end are cut into one contiguous chunk per thread (about total / threads elements), and
// each thread walks the segments its chunk overlaps, so a range of many small segments
// costs one fork, and each thread streams through contiguous memory.
template <class Piece>
void for_each_piece(const OptimizerSegment* segs, size_t count, const Piece& piece) {
  int64_t total = 0;
  for (size_t k = 0; k < count; ++k) total += segs[k].length;
  if (total <= kParallelMin) {
    for (size_t k = 0; k < count; ++k)
      if (segs[k].length > 0) piece(segs[k], 0, segs[k].length);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const SegmentPosition from = locate(segs, count, total * t / threads);
    const SegmentPosition to = locate(segs, count, total * (t + 1) / threads);
    for (size_t k = from.segment; k < count && k <= to.segment; ++k) {
      const int64_t begin = k == from.segment ? from.offset : 0;
      const int64_t end = k == to.segment ? to.offset : segs[k].length;
      if (begin < end) piece(segs[k], begin, end);
    }
  }
}

// Calls fn(std::true_type{}) or fn(std::false_type{}): a run-time flag as a template one.
template <class Fn>
inline void with_flag(bool flag, const Fn& fn) {
  if (flag) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

// --- the entry points (declared in optimizer_isa_kernels.h) ---------------------------
// Scalar factors are computed in double as PyTorch does with Python floats.

// 1 - lr*wd, the decoupled decay factor, rounded once in double (as the scalar kernels'
// compiler fused it, and the CUDA backend's host code computes it).
inline float decoupled_decay(float lr, float wd) {
  return static_cast<float>(std::fma(-static_cast<double>(lr), static_cast<double>(wd), 1.0));
}

template <class P, class G, class S>
void adamw_segments(P* param, float* master, const G* grad, S* m, S* v, const OptimizerSegment* segs, size_t count,
                    const AdamWHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2;
  const bool bc = h.bias_correction == BiasCorrection::On;
  const double bc1 = bc ? 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(h.step)) : 1.0;
  const double bc2 = bc ? 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(h.step)) : 1.0;
  const float step_size = static_cast<float>(h.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const bool decoupled = h.decay == AdamDecay::Decoupled;
  const Arrays<P, G, S> all{param, master, grad, m, v};
  for_each_piece(segs, count, [&](const OptimizerSegment& s, int64_t begin, int64_t end) {
    const float decay = decoupled ? decoupled_decay(h.lr, s.weight_decay) : 1.0f;
    const float l2 = decoupled ? 0.0f : s.weight_decay;
    with_flag(master != nullptr, [&](auto has_master) {
      with_flag(l2 != 0.0f, [&](auto has_l2) {
        const AdamWUpdate<P, G, S, has_master, has_l2> update(b1, b2, step_size, bc2_sqrt, h.eps, h.grad_scale, decay,
                                                              l2);
        update_range(update, all.at(s.offset + begin), end - begin);
      });
    });
  });
}

template <class P, class G, class S>
void sgd_segments(P* param, float* master, const G* grad, S* buf, const OptimizerSegment* segs, size_t count,
                  const SgdHyper& h) {
  const Momentum momentum = buf == nullptr                      ? Momentum::None
                            : h.buffer == MomentumBuffer::Empty ? Momentum::FirstStep
                                                                : Momentum::Running;
  const Arrays<P, G, S> all{param, master, grad, buf, nullptr};
  auto run = [&](const OptimizerSegment& s, int64_t begin, int64_t end, auto has_master, auto has_decay,
                 auto momentum_kind, auto nesterov) {
    const SgdUpdate<P, G, S, has_master, has_decay, decltype(momentum_kind)::value, nesterov> update(
        h.momentum, h.dampening, s.weight_decay, h.lr, h.grad_scale);
    update_range(update, all.at(s.offset + begin), end - begin);
  };
  using None = std::integral_constant<Momentum, Momentum::None>;
  using FirstStep = std::integral_constant<Momentum, Momentum::FirstStep>;
  using Running = std::integral_constant<Momentum, Momentum::Running>;
  for_each_piece(segs, count, [&](const OptimizerSegment& s, int64_t begin, int64_t end) {
    with_flag(master != nullptr, [&](auto has_master) {
      with_flag(s.weight_decay != 0.0f, [&](auto has_decay) {
        if (momentum == Momentum::None) {
          run(s, begin, end, has_master, has_decay, None{}, std::false_type{});
          return;
        }
        with_flag(h.nesterov == Nesterov::On, [&](auto nesterov) {
          if (momentum == Momentum::FirstStep) {
            run(s, begin, end, has_master, has_decay, FirstStep{}, nesterov);
          } else {
            run(s, begin, end, has_master, has_decay, Running{}, nesterov);
          }
        });
      });
    });
  });
}

template <class P, class G, class S>
void lion_segments(P* param, float* master, const G* grad, S* m, const OptimizerSegment* segs, size_t count,
                   const LionHyper& h) {
  const Arrays<P, G, S> all{param, master, grad, m, nullptr};
  for_each_piece(segs, count, [&](const OptimizerSegment& s, int64_t begin, int64_t end) {
    const float decay = decoupled_decay(h.lr, s.weight_decay);
    with_flag(master != nullptr, [&](auto has_master) {
      const LionUpdate<P, G, S, has_master> update(h.beta1, h.beta2, h.lr, h.grad_scale, decay);
      update_range(update, all.at(s.offset + begin), end - begin);
    });
  });
}

}  // namespace zt::cpu::ZT_CPU_OPT_ISA
