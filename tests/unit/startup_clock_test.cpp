#include "train/startup_clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace zt::train {
namespace {

TEST(StartupClock, LapsSumToTheTotalAndShortPhasesAreLeftOutOfTheSummary) {
  StartupClock clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  clock.lap("model init");
  clock.lap("data");  // ~0 s: not listed
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  clock.lap("ZeRO");
  ASSERT_EQ(clock.laps().size(), 3u);
  EXPECT_EQ(clock.laps()[1].first, "data");
  double sum = 0;
  for (const auto& [name, s] : clock.laps()) sum += s;
  EXPECT_NEAR(sum, clock.total_seconds(), 1e-9);
  EXPECT_GE(clock.laps()[0].second, 0.12);
  const std::string line = clock.summary();
  EXPECT_NE(line.find(": model init 0."), std::string::npos) << line;
  EXPECT_NE(line.find(", ZeRO 0."), std::string::npos) << line;
  EXPECT_EQ(line.find("data"), std::string::npos) << line;
}

TEST(StartupClock, NoLapsIsJustTheTotal) {
  const StartupClock clock;
  EXPECT_EQ(clock.summary(), "0.0 s");
}

}  // namespace
}  // namespace zt::train
