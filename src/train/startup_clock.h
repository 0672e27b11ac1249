// Where a run's time goes before its first step (and after its last): a lap per phase,
// logged as one line ("ready in 4.2 s: gpu 0.8 s, model 2.1 s, data 0.3 s, ..."). A short
// benchmark run is mostly start-up; this line says which part to blame.
#pragma once
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace zt::train {

class StartupClock {
 public:
  using Clock = std::chrono::steady_clock;

  // Ends the phase running since the last lap (or construction) and names it.
  void lap(std::string phase);
  double total_seconds() const;
  const std::vector<std::pair<std::string, double>>& laps() const { return laps_; }
  // "4.2 s: gpu 0.8 s, model 2.1 s"; phases under 0.05 s are left out of the list.
  std::string summary() const;

 private:
  Clock::time_point start_ = Clock::now(), last_ = start_;
  std::vector<std::pair<std::string, double>> laps_;
};

}  // namespace zt::train
