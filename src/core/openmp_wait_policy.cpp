// OpenMP worker threads wait passively by default in every zerotrain executable.
//
// libgomp's default wait policy spins up to 300,000 iterations after each parallel region
// before sleeping. As soon as the cores are shared (OpenBLAS's own threads, other ranks or
// processes on the host, a CI machine running tests in parallel), the spinning workers eat
// the time slices of the thread that has the work: tiny-gpt2 (B=4, T=64) on 2 loaded cores
// trained at 306 tok/s, against 8,072 with OMP_WAIT_POLICY=passive; the GPU machine's 16
// cores ran the GPU tests' CPU reference runs at ~300 tok/s (bench/NOTES.md).
//
// libgomp reads its environment once, in its initialiser, which runs before any code of
// ours (even the executable's .preinit_array runs before libc has set up the environment
// that libgomp reads). So when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, this
// constructor sets OMP_WAIT_POLICY=passive and executes the same program again, with the
// same arguments, before main(): no thread, GPU context or MPI state exists yet, and the
// process keeps its pid. A user's own setting is left as it is; ZT_OPENMP_SPIN=1 keeps
// libgomp's default. If /proc/self/exe cannot be executed, the program simply goes on.
//
// Compiled into each executable (CMake: an INTERFACE source of zerotrain_lib), not into
// the static library, where nothing would pull this file in.
#include <unistd.h>

#include <cstdlib>

#include "core/env_vars.h"

namespace {

#if defined(__GLIBC__)
// glibc passes (argc, argv, envp) to the executable's constructors.
__attribute__((constructor)) void default_openmp_wait_policy(int, char** argv, char**) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (zt::env_equals(zt::EnvVar::OpenmpSpin, "1")) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
  execv("/proc/self/exe", argv);
  // Not reached unless exec failed: run on with libgomp's default (already initialised).
}
#endif

}  // namespace
