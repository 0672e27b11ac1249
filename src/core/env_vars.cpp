#include "core/env_vars.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zt {

const std::vector<EnvVarSpec>& env_var_table() {
  using A = EnvAudience;
  static const std::vector<EnvVarSpec> table = {
      {EnvVar::NumThreads, "ZT_NUM_THREADS", A::User, "core/parallel.cpp (set by cli/launcher.cpp)",
       "CPU threads per process (else OMP_NUM_THREADS, else all cores); `zerotrain launch` sets cores / ranks per "
       "node when neither is set"},
      {EnvVar::CollectiveTimeoutS, "ZT_COLLECTIVE_TIMEOUT_S", A::User, "comm/env.cpp",
       "seconds a collective (MPI or NCCL) may wait before it fails naming the operation and the rank (300)"},
      {EnvVar::RestartCount, "ZT_RESTART_COUNT", A::User, "core/fail_point.cpp (set by cli/launcher.cpp)",
       "set by `zerotrain launch`: 0 on the first attempt, k on restart k; failure drills fire only when it is 0 "
       "or unset"},
      {EnvVar::PeakTflops, "ZT_PEAK_TFLOPS", A::User, "train/metrics.cpp, train/trainer.cpp",
       "the MFU denominator: the device's dense TFLOPS, or `measure` (a GPU GEMM timed at start); default: the "
       "peak table"},
      {EnvVar::ZeroKeepStage, "ZT_ZERO_KEEP_STAGE", A::User, "train/training_run.cpp",
       "=1: one process runs the configured ZeRO stage 1-3 instead of stage 0 (the partitioned code paths on one "
       "process or GPU)"},
      {EnvVar::AttentionTc, "ZT_ATTENTION_TC", A::User, "backend/cuda/attention_tc.cu",
       "=0: the f32-FMA attention kernels instead of the tensor-core ones (default on)"},
      {EnvVar::GemmAutotune, "ZT_GEMM_AUTOTUNE", A::User, "backend/cuda/matmul.cpp",
       "=1: time cuBLASLt's top candidate algorithms per GEMM shape and keep the fastest (default off)"},
      {EnvVar::CeF32Logits, "ZT_CE_F32_LOGITS", A::User, "backend/cuda/cross_entropy.cu",
       "=1: f32 logits in the fused LM head + cross-entropy with 16-bit compute (default: the compute dtype)"},
      {EnvVar::OpenmpSpin, "ZT_OPENMP_SPIN", A::User, "core/openmp_wait_policy.cpp",
       "=1: keep libgomp's default spinning wait (otherwise every zerotrain program sets OMP_WAIT_POLICY=passive "
       "when neither it nor GOMP_SPINCOUNT is set)"},
      {EnvVar::CpuIsa, "ZT_CPU_ISA", A::User, "backend/cpu/optimizer_isa.cpp",
       "avx2|avx512|auto: the instruction set of the CPU optimizer kernels (default auto: AVX-512 where the CPU "
       "has it)"},
      {EnvVar::CpuBind, "ZT_CPU_BIND", A::User, "train/rank_binding.cpp",
       "auto|none: with ZeRO-Offload and several ranks on a machine, each rank binds to its own block of cores "
       "in one NUMA node and allocates its host state there (default auto; a process already bound by its "
       "launcher is left alone; none: never bind)"},
      {EnvVar::DeviceComm, "ZT_DEVICE_COMM", A::User, "comm/world.cpp",
       "auto|nccl|staged: the communicator for GPU buffers with several ranks (default auto: NCCL when each rank "
       "has its own GPU, staged through pinned host memory over MPI when ranks share one; staged is for testing "
       "and debugging, slower than NCCL)"},
      {EnvVar::TestFailAt, "ZT_TEST_FAIL_AT", A::Test, "core/fail_point.cpp",
       "POINT or POINT@DETAIL: the process SIGKILLs itself at that fault-injection point (core/fail_point.h; the "
       "points are listed in docs/checkpoints.md)"},
      {EnvVar::TestSignals, "ZT_TEST_SIGNALS", A::Test, "core/fail_point.cpp",
       "POINT@STEP:SIG[+SIG][,...]: the trainer raises stop signals at itself (step@S, micro@S.M, save@S; INT, "
       "TERM, USR1)"},
      {EnvVar::TestSignalsRank, "ZT_TEST_SIGNALS_RANK", A::Test, "core/fail_point.cpp",
       "R: only rank R raises ZT_TEST_SIGNALS' signals (default: every rank)"},
      {EnvVar::TestStallSaveS, "ZT_TEST_STALL_SAVE_S", A::Test, "core/fail_point.cpp",
       "N: sleep N seconds before each checkpoint save (a slow disk, for the stop grace timeout)"},
      {EnvVar::TestNanAtStep, "ZT_TEST_NAN_AT_STEP", A::Test, "core/fail_point.cpp (train/step_protocol.cpp)",
       "S (or S+: from S on): global step S's gradients are NaN (a NaN scale in its backward), as bad weights make "
       "them"},
      {EnvVar::TestNoRenameExchange, "ZT_TEST_NO_RENAME_EXCHANGE", A::Test, "core/fail_point.cpp (io/staging_dir.cpp)",
       "=1: act as if renameat2(RENAME_EXCHANGE) were unsupported (the fallback of NFS and other file systems)"},
      {EnvVar::TestHostMemoryBytes, "ZT_TEST_HOST_MEMORY_BYTES", A::Test, "core/fail_point.cpp (core/memory_info.cpp)",
       "N: pretend the host has N bytes of memory available (the resource checks' refusals)"},
      {EnvVar::TestDriveFreeBytes, "ZT_TEST_DRIVE_FREE_BYTES", A::Test, "core/fail_point.cpp (io/direct_file.cpp)",
       "N: pretend every drive has N bytes free (NVMe offload's refusal of a full drive)"},
      {EnvVar::TestBenchCorrupt, "ZT_TEST_BENCH_CORRUPT", A::Test, "core/fail_point.cpp (cli/bench_comm.cpp)",
       "set: the last rank of `zerotrain bench comm` corrupts one element per size (its check must fail)"},
  };
  return table;
}

const EnvVarSpec& env_var_spec(EnvVar var) {
  for (const EnvVarSpec& s : env_var_table())
    if (s.var == var) return s;
  ZT_CHECK(false, "EnvVar ", static_cast<int>(var), " is missing from env_var_table()");
}

const char* env_name(EnvVar var) { return env_var_spec(var).name; }

const char* env_value(EnvVar var) { return std::getenv(env_name(var)); }

bool env_equals(EnvVar var, const char* value) {
  const char* v = env_value(var);
  return v != nullptr && std::strcmp(v, value) == 0;
}

std::optional<int64_t> env_int(EnvVar var, int64_t min, int64_t max) {
  const char* v = env_value(var);
  if (v == nullptr || *v == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || n < min || n > max)
    ZT_THROW_INPUT(env_name(var), "='", v, "' is not a whole number in [", min, ", ", max, "]; set e.g. ",
                   env_name(var), "=", min, " or unset it (", env_var_spec(var).meaning, ")");
  return n;
}

std::optional<double> env_positive_number(EnvVar var, const char* also_ok) {
  const char* v = env_value(var);
  if (v == nullptr || *v == '\0' || (also_ok != nullptr && std::strcmp(v, also_ok) == 0)) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(d) || d <= 0)
    ZT_THROW_INPUT(env_name(var), "='", v, "' is not a positive number",
                   also_ok ? std::string(" or '") + also_ok + "'" : "", "; fix it or unset it (",
                   env_var_spec(var).meaning, ")");
  return d;
}

}  // namespace zt
