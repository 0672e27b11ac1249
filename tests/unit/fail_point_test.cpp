// core/fail_point.h's FaultInjector: ZT_TEST_SIGNALS raises its signals at exactly the
// named training points and steps, only on ZT_TEST_SIGNALS_RANK when set, never after a
// restart (ZT_RESTART_COUNT > 0), and a malformed spec is BadInput naming it. (The SIGKILL
// drills, ZT_TEST_FAIL_AT, end the process: tests/e2e/checkpoint_crash_test.cpp and
// zero_multirank_test.cpp run them.)
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/fail_point.h"

using namespace zt;

namespace {

volatile std::sig_atomic_t g_usr1 = 0;
extern "C" void count_usr1(int) { g_usr1 = g_usr1 + 1; }

// Sets the drill variables for one test and restores the environment and SIGUSR1 after.
class Drills {
 public:
  Drills(const char* signals, const char* rank = nullptr, const char* restarts = nullptr) {
    set("ZT_TEST_SIGNALS", signals);
    set("ZT_TEST_SIGNALS_RANK", rank);
    set("ZT_RESTART_COUNT", restarts);
    g_usr1 = 0;
    old_ = std::signal(SIGUSR1, count_usr1);
  }
  ~Drills() {
    for (const char* n : {"ZT_TEST_SIGNALS", "ZT_TEST_SIGNALS_RANK", "ZT_RESTART_COUNT"}) ::unsetenv(n);
    std::signal(SIGUSR1, old_);
  }

 private:
  static void set(const char* name, const char* value) {
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  void (*old_)(int) = SIG_DFL;
};

}  // namespace

TEST(FaultInjector, RaisesAtTheNamedPointAndStepOnly) {
  const Drills d("step@2:USR1,micro@3.1:USR1+USR1,save@4:USR1");
  const FaultInjector drills(0);
  drills.at(TrainPoint::StepDone, 1);
  drills.at(TrainPoint::Save, 2);
  drills.at(TrainPoint::BeforeMicroBatch, 3, 2);
  EXPECT_EQ(g_usr1, 0);
  drills.at(TrainPoint::StepDone, 2);
  EXPECT_EQ(g_usr1, 1);
  drills.at(TrainPoint::BeforeMicroBatch, 3, 1);
  EXPECT_EQ(g_usr1, 3);
  drills.at(TrainPoint::Save, 4);
  EXPECT_EQ(g_usr1, 4);
}

// sample@N: before generated token N of the end-of-run samples or `zerotrain generate`.
TEST(FaultInjector, SamplePointRaisesBeforeTheNamedToken) {
  const Drills d("sample@3:USR1");
  const FaultInjector drills(0);
  drills.at(TrainPoint::SampleToken, 2);
  drills.at(TrainPoint::StepDone, 3);  // another point with the same number
  EXPECT_EQ(g_usr1, 0);
  drills.at(TrainPoint::SampleToken, 3);
  EXPECT_EQ(g_usr1, 1);
}

TEST(FaultInjector, OnlyTheChosenRankAndOnlyTheFirstAttempt) {
  {
    const Drills d("step@1:USR1", "1");
    FaultInjector(0).at(TrainPoint::StepDone, 1);
    EXPECT_EQ(g_usr1, 0) << "rank 0 with ZT_TEST_SIGNALS_RANK=1";
    FaultInjector(1).at(TrainPoint::StepDone, 1);
    EXPECT_EQ(g_usr1, 1);
  }
  {
    const Drills d("step@1:USR1", nullptr, "1");
    FaultInjector(0).at(TrainPoint::StepDone, 1);
    EXPECT_EQ(g_usr1, 0) << "a restarted job must be able to finish";
  }
  {
    const Drills d("step@1:USR1", nullptr, "0");
    FaultInjector(0).at(TrainPoint::StepDone, 1);
    EXPECT_EQ(g_usr1, 1) << "the launcher's first attempt";
  }
}

TEST(FaultInjector, AMalformedSpecIsBadInputNamingIt) {
  for (const char* bad : {"step@2", "nowhere@2:TERM", "micro@2:TERM", "step@2:HUP"}) {
    const Drills d(bad);
    try {
      FaultInjector drills(0);
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << bad;
      EXPECT_NE(std::string(e.what()).find("ZT_TEST_SIGNALS"), std::string::npos) << e.what();
    }
  }
}
