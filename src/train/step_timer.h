// wall_clock_breakdown: where a training step's time goes, as DeepSpeed's engine reports
// it (`time (ms) | fwd: ... | bwd: ... | step: ...` at steps_per_print).
//
// The loop marks where each phase begins; a phase lasts until the next mark. On the CPU
// marks read steady_clock. On the GPU they are CUDA events on the compute stream
// (cuda::Timeline), so the step keeps running without host waits; take() waits once for
// the last event, at the log step. PhaseHooks puts the forward/backward boundary inside
// model.forward_backward: the first unit backward hook of a micro-batch.
#pragma once
#include <chrono>
#include <memory>

#include "core/device.h"
#include "model/transformer.h"

namespace zt::cuda {
class Timeline;
}

namespace zt::train {

enum class Phase { Forward, Backward, Optimizer, Other };

class PhaseTimer {
 public:
  explicit PhaseTimer(Device device);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void mark(Phase phase);
  Phase current() const { return current_; }

  struct Totals {
    double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  };
  // The time of each phase since the previous take() (the phase running now is cut at
  // this point and goes on counting into the next totals).
  Totals take();

 private:
  Phase current_ = Phase::Other;
  Totals totals_;  // CPU
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  std::unique_ptr<cuda::Timeline> timeline_;  // GPU
};

// The model's unit hooks for a timed run: the ZeRO engine's, with the forward/backward
// boundary marked first (so a stage-3 gather for the head's backward counts as backward).
class PhaseHooks final : public model::UnitHooks {
 public:
  PhaseHooks(model::UnitHooks& inner, PhaseTimer& timer) : inner_(inner), timer_(timer) {}
  void before_forward(model::Unit& u) override { inner_.before_forward(u); }
  void after_forward(model::Unit& u) override { inner_.after_forward(u); }
  void before_backward(model::Unit& u) override {
    if (timer_.current() == Phase::Forward) timer_.mark(Phase::Backward);
    inner_.before_backward(u);
  }
  void after_backward(model::Unit& u) override { inner_.after_backward(u); }

 private:
  model::UnitHooks& inner_;
  PhaseTimer& timer_;
};

}  // namespace zt::train
