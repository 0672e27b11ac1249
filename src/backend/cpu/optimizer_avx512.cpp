// The CPU optimizer loops for AVX-512 (this file alone is compiled with -mavx512f/bw/vl/dq,
// CMakeLists.txt), taken only when the CPU has it (optimizer_isa.h). It defines nothing
// outside namespace zt::cpu::avx512, so no AVX-512 copy of a shared inline function can
// end up in the program.
#if defined(__x86_64__)
#define ZT_CPU_OPT_ISA avx512
#define ZT_CPU_OPT_AVX512 1
#include "backend/cpu/optimizer_loops.h"
#include "backend/cpu/optimizer_isa_kernels.h"

namespace zt::cpu::avx512 {
ZT_CPU_OPTIMIZER_TYPES(ZT_CPU_OPTIMIZER_INSTANTIATE)
}  // namespace zt::cpu::avx512
#endif
