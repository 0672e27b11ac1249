// zero::HostWorker: jobs run in submission order on one other thread; wait_idle() waits
// for all of them and rethrows the first error once; the destructor runs what is queued.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "zero/host_worker.h"

using zt::zero::HostWorker;

TEST(HostWorker, RunsJobsInOrderOnAnotherThread) {
  std::vector<int> order;
  std::thread::id ran_on;
  {
    HostWorker w;
    for (int i = 0; i < 50; ++i)
      w.submit([&, i] {
        if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // later jobs must still wait
        order.push_back(i);
        ran_on = std::this_thread::get_id();
      });
    w.wait_idle();
    ASSERT_EQ(order.size(), 50u);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
}

TEST(HostWorker, AJobsErrorIsRethrownOnceAndLaterJobsStillRun) {
  HostWorker w;
  std::atomic<int> after{0};
  w.submit([] { throw std::runtime_error("host step failed"); });
  w.submit([&] { ++after; });
  try {
    w.wait_idle();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "host step failed");
  }
  EXPECT_EQ(after.load(), 1);
  EXPECT_NO_THROW(w.wait_idle());  // reported once
  EXPECT_NO_THROW(w.check());
}

TEST(HostWorker, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    HostWorker w;
    for (int i = 0; i < 10; ++i)
      w.submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 10);
}
