// StopSignals in a forked child each (death tests): the first signal is a stop request,
// more SIGTERMs are absorbed, also after the object is gone once a stop happened (the
// second of a pair may land during the teardown); a third SIGINT exits at once with 130
// naming the last checkpoint; without a stop the previous handlers come back.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include <unistd.h>

#include "train/signals.h"

using zt::train::StopSignals;

TEST(StopSignalsDeathTest, FirstSignalIsARequestAndMoreSigtermsAreAbsorbedEvenAfterTheRun) {
  EXPECT_EXIT(
      {
        {
          StopSignals s;
          std::raise(SIGTERM);
          if (!s.requested() || s.signal() != SIGTERM) std::_Exit(3);
          std::raise(SIGTERM);
          std::raise(SIGUSR1);
        }
        std::raise(SIGTERM);  // the teardown after the run
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "absorbed");
}

TEST(StopSignalsDeathTest, ThirdSigintExitsAtOnceNamingTheLastCheckpoint) {
  EXPECT_EXIT(
      {
        StopSignals s;
        s.saved("out/checkpoints/global_step7", 7);
        s.saving(8);
        std::raise(SIGINT);
        std::raise(SIGINT);
        std::raise(SIGINT);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(130),
      "third SIGINT: exiting at once; the checkpoint of step 8 was being written.*global_step7 \\(step 7");
}

TEST(StopSignalsDeathTest, WithoutAStopThePreviousHandlersComeBack) {
  EXPECT_EXIT(
      {
        { StopSignals s; }
        std::raise(SIGTERM);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST(StopSignalsDeathTest, GraceTimeoutExitsWith128PlusTheFirstSignalAndAStrayAlarmIsIgnored) {
  EXPECT_EXIT(
      {
        StopSignals s(zt::train::StopOptions{1});
        std::raise(SIGALRM);  // before any stop: not the grace timeout
        std::raise(SIGTERM);
        for (;;) ::pause();  // a save that never ends
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "stop_grace_seconds passed since the stop signal");
}
