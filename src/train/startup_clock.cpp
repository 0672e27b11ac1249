#include "train/startup_clock.h"

#include <cstdio>

namespace zt::train {

namespace {
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}
}  // namespace

void StartupClock::lap(std::string phase) {
  const Clock::time_point now = Clock::now();
  laps_.emplace_back(std::move(phase), std::chrono::duration<double>(now - last_).count());
  last_ = now;
}

double StartupClock::total_seconds() const { return std::chrono::duration<double>(last_ - start_).count(); }

std::string StartupClock::summary() const {
  std::string out = seconds(total_seconds());
  const char* sep = ": ";
  for (const auto& [phase, s] : laps_) {
    if (s < 0.05) continue;
    out += sep + phase + " " + seconds(s);
    sep = ", ";
  }
  return out;
}

}  // namespace zt::train
