// Test-only fault injection: the one facility behind every failure drill, so that the code
// under test only marks where a fault may happen and never carries test hooks of its own.
// Drills fire in a job's first attempt only (ZT_RESTART_COUNT unset or 0): a job that
// `zerotrain launch --max-restarts` restarts after the drill must be able to finish.
// Unset (production): one environment lookup per point, nothing else.
//
// Crashes at a point (ZT_TEST_FAIL_AT): the process SIGKILLs itself when it reaches the
// named point, so that tests can crash at an exact moment (not by timing luck) and check
// what the crash leaves behind.
//
//   ZT_TEST_FAIL_AT=checkpoint.swapped              the first time the point is reached
//   ZT_TEST_FAIL_AT=checkpoint.swapped@global_step3 only when `detail` is global_step3
//   ZT_TEST_FAIL_AT=train.step_done@rank1.step4     rank 1, once global step 4 is done
//
// The save sequence's points are listed in docs/checkpoints.md (Atomicity); the training
// loop's are those of TrainPoint below.
//
// Stop signals raised at itself (FaultInjector, read once per training run), so every
// stop-path case is deterministic instead of depending on when a signal lands:
//
//   ZT_TEST_SIGNALS="WHERE@WHEN:SIG[+SIG...][,...]"   WHERE@WHEN is one of
//     step@S      after global step S is done (before the stop check)
//     micro@S.M   during global step S (1-based), before its micro-batch M (0-based, M >= 1)
//     save@S      as the checkpoint of step S starts being written
//     sample@N    during generation (the end-of-run samples, `zerotrain generate`), before
//                 generated token N (0-based) is chosen
//   SIG: INT, TERM or USR1, raised in order (e.g. save@2:TERM+TERM = a doubled SIGTERM).
//   ZT_TEST_SIGNALS_RANK=R   only rank R raises them (default: every rank)
//   ZT_TEST_STALL_SAVE_S=N   sleep N seconds before each save (a slow disk, for the grace timeout)
//
// Non-finite gradients (nan_gradients_at()): ZT_TEST_NAN_AT_STEP=S runs the backward of
// global step S (1-based) with a NaN gradient scale, so every gradient of that step is NaN,
// as NaN weights, data or optimizer state make them (the step protocol's stop or skip);
// ZT_TEST_NAN_AT_STEP=S+ does so for every step from S on.
//
// Simulated conditions (simulated(), simulated_host_memory()): a test makes the code take
// the path it takes on another machine or file system. They are not faults and do not
// depend on the attempt.
//
//   ZT_TEST_NO_RENAME_EXCHANGE=1   renameat2(RENAME_EXCHANGE) unsupported (NFS and others)
//   ZT_TEST_BENCH_CORRUPT (set)    `zerotrain bench comm`'s last rank corrupts a result
//   ZT_TEST_HOST_MEMORY_BYTES=N    the host has N bytes of memory available
//   ZT_TEST_DRIVE_FREE_BYTES=N     every drive has N bytes free (a full NVMe drive)
//
// Every ZT_TEST_* variable is read here and nowhere else (core/env_vars.h lists them).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace zt {

// The crash drill at a named point; `detail` says which pass through it this is.
void fail_point(const char* point, const char* detail = nullptr);

// The training loop's fault-injection points.
enum class TrainPoint {
  StepDone,          // fail point train.step_done@rank<R>.step<S>; signals step@S
  BeforeMicroBatch,  // fail point train.before_micro_batch@rank<R>.step<S>.micro<M>; signals micro@S.M
  Save,              // fail point train.save@rank<R>.step<S>; signals save@S, then the stall
  SampleToken,       // fail point train.sample_token@rank<R>.token<N>; signals sample@N (`step` is N)
};

// Whether global step `step`'s gradients are to be NaN (ZT_TEST_NAN_AT_STEP; a drill:
// the first attempt only, one environment lookup per call).
bool nan_gradients_at(int64_t step);

enum class Simulated { NoRenameExchange, CorruptBenchResult };
bool simulated(Simulated condition);
// The host memory available that a test pretends (nullopt: none pretended).
std::optional<uint64_t> simulated_host_memory();
// The free bytes of any drive that a test pretends (nullopt: none pretended).
std::optional<uint64_t> simulated_drive_free();

class FaultInjector {
 public:
  // Reads this rank's drills from the environment; throws BadInput on a malformed spec.
  explicit FaultInjector(int rank);
  // The drills of `point` during global step `step` (micro: BeforeMicroBatch's index).
  void at(TrainPoint point, int64_t step, int64_t micro = 0) const;

 private:
  struct SignalDrill {
    TrainPoint point;
    int64_t step = 0, micro = 0;
    std::vector<int> signals;
  };
  int rank_;
  std::vector<SignalDrill> signals_;
  int64_t stall_seconds_ = 0;
};

}  // namespace zt
