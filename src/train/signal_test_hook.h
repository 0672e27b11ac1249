// Test-only fault injection for the stop-signal paths (tests/e2e/signals_test.cpp): the
// trainer raises signals at itself at chosen points, so every case is deterministic
// instead of depending on when a signal from outside happens to land.
//
//   ZT_TEST_SIGNALS="POINT:SIG[+SIG...][,POINT:...]"   POINT is one of
//     step@S      after global step S is done (before the stop check)
//     micro@S.M   during global step S (1-based), before its micro-batch M (0-based, M >= 1)
//     save@S      as the checkpoint of step S starts being written
//   SIG: INT, TERM or USR1, raised in order (e.g. save@2:TERM+TERM = a doubled SIGTERM).
//   ZT_TEST_SIGNALS_RANK=R   only rank R raises them (default: every rank)
//   ZT_TEST_STALL_SAVE_S=N   sleep N seconds before each save (a slow disk, for the grace timeout)
// Unset (every real run): no effect beyond one getenv at start.
#pragma once
#include <cstdint>
#include <vector>

namespace zt::train {

enum class SignalPoint { AfterStep, BeforeMicroBatch, Save };

class SignalTestHook {
 public:
  SignalTestHook(int rank);  // reads the environment; throws BadInput on a malformed spec
  void at(SignalPoint point, int64_t step, int64_t micro = 0) const;
  void before_save() const;  // the stall, if asked for

 private:
  struct Entry {
    SignalPoint point;
    int64_t step = 0, micro = 0;
    std::vector<int> signals;
  };
  std::vector<Entry> entries_;
  int64_t stall_seconds_ = 0;
};

}  // namespace zt::train
