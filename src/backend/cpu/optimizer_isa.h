// Which instruction set the CPU optimizer kernels (backend/cpu/optimizer.cpp) run on. Their
// loops are compiled twice (optimizer_loops.h): with the build's AVX2 + FMA flags, and with
// AVX-512 in its own translation unit. The AVX-512 path is taken when the CPU and OS
// support it, unless ZT_CPU_ISA=avx2 asks for the other; both give bitwise the same results.
#pragma once

namespace zt::cpu {

enum class OptimizerIsa { Avx2, Avx512 };

// The path in use, for logs and `zerotrain report`: "avx512", "avx2" (or "portable" on a
// build for a CPU other than x86-64). Chosen on first use: ZT_CPU_ISA=avx2|avx512|auto,
// else the best the CPU supports; a request the CPU cannot run falls back with a warning.
const char* cpu_optimizer_isa();
OptimizerIsa optimizer_isa();
const char* optimizer_isa_name(OptimizerIsa isa);

// The rule of the first choice: `request` is ZT_CPU_ISA's value (nullptr when unset);
// avx2 or avx512 where the CPU allows (avx512 where it does not falls back to avx2 with a
// warning), anything else (auto, unset, a typo: warned) the best the CPU has.
OptimizerIsa resolve_optimizer_isa(const char* request, bool avx512_available);

// Whether this build and this CPU can run `isa`.
bool optimizer_isa_supported(OptimizerIsa isa);
// Tests and benchmarks compare the paths in one process: every later kernel call takes
// `isa`. Returns false and changes nothing when optimizer_isa_supported(isa) is false.
bool set_optimizer_isa(OptimizerIsa isa);

}  // namespace zt::cpu
