// SIGINT/SIGTERM: the first signal asks the trainer to finish the current step, save a
// checkpoint and exit cleanly; a second one falls back to the default action.
#pragma once

namespace zt::train {

// Installs the handlers for the lifetime of the object (RAII; restores the previous ones).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  bool requested() const;
  int signal() const;  // the signal received, 0 when none
};

}  // namespace zt::train
