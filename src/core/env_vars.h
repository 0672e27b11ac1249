// Every ZT_* environment variable zerotrain reads, in one table: its name, what it means,
// which code reads it, and whether it is for users or for tests only. Code reads them only
// through env_value(EnvVar) (tests/unit/env_vars_test.sh fails on a getenv("ZT_...")
// anywhere else in src/, and on a ZT_ name src/ mentions that the table lacks);
// `zerotrain report` prints them with their current values, and docs/launching.md
// ("Environment variables") documents the same list.
//
// Variables that only scripts and the test programs read (ZT_PRESET, ZT_JOBS,
// ZT_REQUIRE_GPU, ...) are not the program's: docs/launching.md lists them apart.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace zt {

enum class EnvVar {
  // user-facing
  NumThreads,
  CollectiveTimeoutS,
  RestartCount,
  PeakTflops,
  ZeroKeepStage,
  AttentionTc,
  GemmAutotune,
  CeF32Logits,
  OpenmpSpin,
  CpuIsa,
  CpuBind,
  DeviceComm,
  // test-only (failure drills, simulated machines)
  TestFailAt,
  TestSignals,
  TestSignalsRank,
  TestStallSaveS,
  TestNanAtStep,
  TestNoRenameExchange,
  TestHostMemoryBytes,
  TestDriveFreeBytes,
  TestBenchCorrupt,
};

enum class EnvAudience { User, Test };

struct EnvVarSpec {
  EnvVar var;
  const char* name;  // ZT_...
  EnvAudience audience;
  const char* read_by;  // the source file(s) that act on it
  const char* meaning;  // one line, with the accepted values and the default
};

// The table, in the documentation's order.
const std::vector<EnvVarSpec>& env_var_table();
const EnvVarSpec& env_var_spec(EnvVar var);
const char* env_name(EnvVar var);

// The variable's value, or nullptr when it is unset: the only place a ZT_* name is looked
// up in the environment.
const char* env_value(EnvVar var);
// Whether it is set to exactly `value`.
bool env_equals(EnvVar var, const char* value);
// The variable as a whole number in [min, max]; nullopt when unset or empty. Any other
// value (letters, a fraction, trailing text, out of range) is BadInput naming the variable
// and the range: a typo is never silently the default.
std::optional<int64_t> env_int(EnvVar var, int64_t min, int64_t max);
// The same for a finite number > 0 (ZT_PEAK_TFLOPS); `also_ok` is a word accepted as
// itself (nullopt returned for it, as for unset).
std::optional<double> env_positive_number(EnvVar var, const char* also_ok = nullptr);

}  // namespace zt
