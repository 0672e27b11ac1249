#include "train/step_timer.h"

#include <string>

#include "backend/cuda_api.h"

namespace zt::train {

namespace {
const char* label(Phase p) {
  switch (p) {
    case Phase::Forward:
      return "fwd";
    case Phase::Backward:
      return "bwd";
    case Phase::Optimizer:
      return "step";
    case Phase::Other:
      break;
  }
  return "other";
}

void add(PhaseTimer::Totals& t, const std::string& phase, double ms) {
  if (phase == "fwd") t.forward_ms += ms;
  if (phase == "bwd") t.backward_ms += ms;
  if (phase == "step") t.optimizer_ms += ms;
}
}  // namespace

PhaseTimer::PhaseTimer(Device device) {
  if (device.is_cuda()) {
    timeline_ = std::make_unique<cuda::Timeline>();
    timeline_->mark(label(current_));
  }
}

PhaseTimer::~PhaseTimer() = default;

void PhaseTimer::mark(Phase phase) {
  if (timeline_) {
    timeline_->mark(label(phase));
  } else {
    const auto now = std::chrono::steady_clock::now();
    add(totals_, label(current_), std::chrono::duration<double, std::milli>(now - since_).count());
    since_ = now;
  }
  current_ = phase;
}

PhaseTimer::Totals PhaseTimer::take() {
  mark(current_);  // cut the running phase here
  Totals t;
  if (timeline_) {
    for (const cuda::Timeline::Interval& i : timeline_->intervals()) add(t, i.label, i.ms);
    timeline_->clear();
    timeline_->mark(label(current_));  // the running phase goes on from here
  } else {
    t = totals_;
    totals_ = Totals();
  }
  return t;
}

}  // namespace zt::train
