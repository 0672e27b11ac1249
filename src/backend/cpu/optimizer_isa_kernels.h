// The CPU optimizer loops of each instruction set (optimizer_loops.h, instantiated in
// optimizer_avx2.cpp and optimizer_avx512.cpp), for the dispatch in optimizer.cpp. Each
// updates the segments of a range (backend/optimizer_segments.h; offsets relative to the
// pointers) with the meaning of optimizer_raw.h's *_segments functions.
#pragma once
#include <cstddef>

#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "core/dtype.h"

// The (parameter, gradient, state) dtypes the kernels exist for. State is f32, or bf16 for a
// bf16 parameter without a master copy.
#define ZT_CPU_OPTIMIZER_TYPES(X) \
  X(float, float, float)          \
  X(float, bf16, float)           \
  X(float, f16, float)            \
  X(bf16, float, float)           \
  X(bf16, bf16, float)            \
  X(bf16, f16, float)             \
  X(f16, float, float)            \
  X(f16, bf16, float)             \
  X(f16, f16, float)              \
  X(bf16, float, bf16)            \
  X(bf16, bf16, bf16)             \
  X(bf16, f16, bf16)

#define ZT_CPU_OPTIMIZER_ISA_DECLARATIONS(isa)                                                                        \
  namespace isa {                                                                                                     \
  template <class P, class G, class S>                                                                                \
  void adamw_segments(P* param, float* master, const G* grad, S* m, S* v, const OptimizerSegment* segs, size_t count, \
                      const AdamWHyper& h);                                                                           \
  template <class P, class G, class S>                                                                                \
  void sgd_segments(P* param, float* master, const G* grad, S* buf, const OptimizerSegment* segs, size_t count,       \
                    const SgdHyper& h);                                                                               \
  template <class P, class G, class S>                                                                                \
  void lion_segments(P* param, float* master, const G* grad, S* m, const OptimizerSegment* segs, size_t count,        \
                     const LionHyper& h);                                                                             \
  }

// One instantiation of each entry point, in the unit that includes optimizer_loops.h.
#define ZT_CPU_OPTIMIZER_INSTANTIATE(P, G, S)                                                                      \
  template void adamw_segments<P, G, S>(P*, float*, const G*, S*, S*, const OptimizerSegment*, size_t,             \
                                        const AdamWHyper&);                                                        \
  template void sgd_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegment*, size_t, const SgdHyper&); \
  template void lion_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegment*, size_t, const LionHyper&);

namespace zt::cpu {
ZT_CPU_OPTIMIZER_ISA_DECLARATIONS(avx2)
#if defined(__x86_64__)
ZT_CPU_OPTIMIZER_ISA_DECLARATIONS(avx512)
#endif
}  // namespace zt::cpu
