#include "pipeline/schedule.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"

namespace zt::pipeline {
namespace {

void check_sizes(const char* name, int stages, int micro_batches) {
  ZT_CHECK(stages >= 1 && micro_batches >= 1, name, " schedule: ", stages, " stages and ", micro_batches,
           " micro-batches (each at least 1)");
}

Boundary boundary_of(int micro_batch, int micro_batches) {
  return micro_batch + 1 == micro_batches ? Boundary::Last : Boundary::Inside;
}

// The instructions of one stage's forward and backward of a micro-batch (file comment).
struct StageOps {
  int stage, stages, micro_batches, slots;

  Instruction at(Op op, int m) const { return {op, m, m % slots, boundary_of(m, micro_batches)}; }
  std::vector<Instruction> forward(int m) const {
    std::vector<Instruction> step;
    if (stage > 0) step.push_back(at(Op::RecvActivation, m));
    if (stage == 0 || stage == stages - 1) step.push_back(at(Op::LoadMicroBatch, m));
    step.push_back(at(Op::Forward, m));
    if (stage < stages - 1) step.push_back(at(Op::SendActivation, m));
    return step;
  }
  std::vector<Instruction> backward(int m) const {
    std::vector<Instruction> step;
    if (stage < stages - 1) step.push_back(at(Op::RecvGrad, m));
    step.push_back(at(Op::Backward, m));
    if (stage > 0) step.push_back(at(Op::SendGrad, m));
    return step;
  }
};

std::vector<Instruction> final_step() { return {{Op::ReduceGrads}, {Op::OptimizerStep}}; }

// A schedule from the step of each stage's forward and backward of each micro-batch.
template <class ForwardAt, class BackwardAt>
Schedule on_grid(const char* name, int stages, int micro_batches, int grid_steps, const std::vector<int>& slots,
                 ForwardAt forward_at, BackwardAt backward_at) {
  std::vector<std::vector<std::vector<Instruction>>> all(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const StageOps ops{s, stages, micro_batches, slots[static_cast<size_t>(s)]};
    auto& steps = all[static_cast<size_t>(s)];
    steps.resize(static_cast<size_t>(grid_steps));
    for (int m = 0; m < micro_batches; ++m) {
      steps[static_cast<size_t>(forward_at(s, m))] = ops.forward(m);
      steps[static_cast<size_t>(backward_at(s, m))] = ops.backward(m);
    }
    steps.push_back(final_step());
  }
  return Schedule(name, stages, micro_batches, slots, std::move(all));
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::LoadMicroBatch:
      return "LoadMicroBatch";
    case Op::Forward:
      return "Forward";
    case Op::Backward:
      return "Backward";
    case Op::SendActivation:
      return "SendActivation";
    case Op::RecvActivation:
      return "RecvActivation";
    case Op::SendGrad:
      return "SendGrad";
    case Op::RecvGrad:
      return "RecvGrad";
    case Op::ReduceGrads:
      return "ReduceGrads";
    case Op::OptimizerStep:
      return "OptimizerStep";
  }
  return "?";
}

std::string to_string(const Instruction& i) {
  std::string s = op_name(i.op);
  if (i.micro_batch < 0) return s;
  s += "(m" + std::to_string(i.micro_batch) + ",s" + std::to_string(i.slot);
  if (i.boundary == Boundary::Last) s += ",last";
  return s + ")";
}

std::string to_string(const std::vector<Instruction>& step) {
  std::vector<std::string> parts;
  for (const Instruction& i : step) parts.push_back(to_string(i));
  return join(parts, " ");
}

Schedule::Schedule(std::string name, int stages, int micro_batches, std::vector<int> slots,
                   std::vector<std::vector<std::vector<Instruction>>> steps)
    : name_(std::move(name)),
      stages_(stages),
      micro_batches_(micro_batches),
      slots_(std::move(slots)),
      steps_(std::move(steps)) {
  ZT_CHECK(static_cast<int>(slots_.size()) == stages_ && static_cast<int>(steps_.size()) == stages_, name_,
           " schedule: slots and steps for ", stages_, " stages");
}

int Schedule::slots(int stage) const {
  ZT_CHECK(stage >= 0 && stage < stages_, name_, " schedule: stage ", stage, " of ", stages_);
  return slots_[static_cast<size_t>(stage)];
}

const std::vector<std::vector<Instruction>>& Schedule::steps(int stage) const {
  ZT_CHECK(stage >= 0 && stage < stages_, name_, " schedule: stage ", stage, " of ", stages_);
  return steps_[static_cast<size_t>(stage)];
}

Schedule data_parallel_schedule(int micro_batches) {
  check_sizes("data-parallel", 1, micro_batches);
  std::vector<std::vector<Instruction>> steps;
  for (int m = 0; m < micro_batches; ++m) {
    const Boundary b = boundary_of(m, micro_batches);
    steps.push_back({{Op::LoadMicroBatch, m, 0, b}, {Op::Forward, m, 0, b}, {Op::Backward, m, 0, b}});
  }
  steps.push_back(final_step());
  return Schedule("data-parallel", 1, micro_batches, {1}, {std::move(steps)});
}

Schedule gpipe_schedule(int stages, int micro_batches) {
  check_sizes("GPipe", stages, micro_batches);
  const int fill = micro_batches + stages - 1;  // steps of the forward (and of the backward) phase
  return on_grid(
      "GPipe", stages, micro_batches, 2 * fill, std::vector<int>(static_cast<size_t>(stages), micro_batches),
      [](int s, int m) { return m + s; }, [=](int s, int m) { return fill + m + (stages - 1 - s); });
}

Schedule one_f_one_b_schedule(int stages, int micro_batches) {
  check_sizes("1F1B", stages, micro_batches);
  // Forward and backward steps never meet on a stage: 2m + s and 2m' + 2S - 1 - s differ
  // in parity. Before its backward of m a stage has run the forwards of m .. m + S - 1 - s.
  std::vector<int> slots;
  for (int s = 0; s < stages; ++s) slots.push_back(std::min(stages - s, micro_batches));
  return on_grid(
      "1F1B", stages, micro_batches, 2 * (micro_batches + stages - 1), slots, [](int s, int m) { return 2 * m + s; },
      [=](int s, int m) { return 2 * m + 2 * stages - 1 - s; });
}

}  // namespace zt::pipeline
