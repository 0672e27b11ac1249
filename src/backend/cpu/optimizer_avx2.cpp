// The CPU optimizer loops with the build's flags (AVX2 + FMA + F16C on x86-64): the path
// of every CPU without AVX-512 (optimizer_isa.h).
#define ZT_CPU_OPT_ISA avx2
#define ZT_CPU_OPT_AVX512 0
#include "backend/cpu/optimizer_loops.h"
#include "backend/cpu/optimizer_isa_kernels.h"

namespace zt::cpu::avx2 {
ZT_CPU_OPTIMIZER_TYPES(ZT_CPU_OPTIMIZER_INSTANTIATE)
}  // namespace zt::cpu::avx2
