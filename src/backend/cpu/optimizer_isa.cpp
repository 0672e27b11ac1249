#include "backend/cpu/optimizer_isa.h"

#include <atomic>
#include <cstring>

#include "core/env_vars.h"
#include "core/log.h"

namespace zt::cpu {

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // Every extension the AVX-512 unit is compiled with (CMakeLists.txt); libgcc's check also
  // asks the OS (XGETBV) whether it saves the AVX-512 registers.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

// The choice, made on first use; set_optimizer_isa may change it later (tests, benchmarks).
std::atomic<OptimizerIsa>& current_isa() {
  static std::atomic<OptimizerIsa> isa{resolve_optimizer_isa(env_value(EnvVar::CpuIsa), cpu_has_avx512())};
  return isa;
}

}  // namespace

OptimizerIsa resolve_optimizer_isa(const char* request, bool avx512_available) {
  const OptimizerIsa best = avx512_available ? OptimizerIsa::Avx512 : OptimizerIsa::Avx2;
  if (request == nullptr || request[0] == '\0' || std::strcmp(request, "auto") == 0) return best;
  if (std::strcmp(request, "avx2") == 0) return OptimizerIsa::Avx2;
  if (std::strcmp(request, "avx512") == 0) {
    if (!avx512_available)
      ZT_WARN("ZT_CPU_ISA=avx512: this CPU (or build) has no AVX-512; the CPU optimizer uses avx2");
    return best;
  }
  ZT_WARN("ZT_CPU_ISA=", request, " is not avx2, avx512 or auto; the CPU optimizer uses ", optimizer_isa_name(best));
  return best;
}

OptimizerIsa optimizer_isa() { return current_isa().load(std::memory_order_relaxed); }

const char* optimizer_isa_name(OptimizerIsa isa) {
#if defined(__x86_64__)
  return isa == OptimizerIsa::Avx512 ? "avx512" : "avx2";
#else
  (void)isa;
  return "portable";  // the "avx2" unit built for another CPU, lane by lane
#endif
}

const char* cpu_optimizer_isa() { return optimizer_isa_name(optimizer_isa()); }

bool optimizer_isa_supported(OptimizerIsa isa) { return isa == OptimizerIsa::Avx2 || cpu_has_avx512(); }

bool set_optimizer_isa(OptimizerIsa isa) {
  if (!optimizer_isa_supported(isa)) return false;
  current_isa().store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace zt::cpu
