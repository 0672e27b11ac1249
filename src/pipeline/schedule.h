// A training step as data: per pipeline stage, a list of steps, each a short list of
// instructions (DeepSpeed's instruction streams, runtime/pipe/schedule.py). An executor
// (pipeline/executor.h) runs one stage's list over a model::ModelStage; what a schedule
// says is tested on its lists alone.
//
// Steps are a time grid shared by the stages: each holds at most one Forward or Backward
// per stage, and what a stage sends in step k its neighbour receives in step k + 1. The
// last step of every stage is [ReduceGrads, OptimizerStep].
//
//   data-parallel (one stage, today's gradient accumulation), per micro-batch m:
//     [LoadMicroBatch m, Forward m, Backward m]                         slots: 1
//   GPipe (S stages, M micro-batches): every forward, then every backward; stage s runs
//     the forward of m in step m + s and its backward in step (M + S - 1) + m + (S - 1 - s)
//                                                                       slots: M
//   1F1B (PipeDream-flush): stage s runs the forward of m in step 2m + s and its backward
//     in step 2m + 2S - 1 - s: S - 1 - s warm-up forwards, then one forward and one
//     backward in turn, then the remaining backwards; 2 (M + S - 1) steps
//                                                                       slots: min(S - s, M)
//
// A forward step of stage s: [RecvActivation (s > 0), LoadMicroBatch (first and last
// stage: tokens, targets), Forward, SendActivation (s < S - 1)]; a backward step:
// [RecvGrad (s < S - 1), Backward, SendGrad (s > 0)]. Backwards run in micro-batch order,
// so the last micro-batch's backward completes the accumulation: its instructions carry
// Boundary::Last, which the ZeRO engine's begin_micro_batch(last) needs (stages 0-1
// reduce during that backward).
#pragma once
#include <string>
#include <vector>

namespace zt::pipeline {

enum class Op {
  LoadMicroBatch,  // the micro-batch's tokens (first stage) and targets (last stage)
  Forward,         // the stage's forward of the micro-batch into its slot
  Backward,        // its backward (the last stage: from the loss)
  SendActivation,  // the slot's output to the next stage
  RecvActivation,  // the previous stage's output, the slot's input
  SendGrad,        // the slot's input gradient to the previous stage
  RecvGrad,        // the next stage's input gradient, the slot's output gradient
  ReduceGrads,     // the accumulated gradients are complete (data-parallel reduction done)
  OptimizerStep,   // the update
};
const char* op_name(Op op);

// Whether an instruction belongs to the step's last micro-batch.
enum class Boundary { Inside, Last };

struct Instruction {
  Op op = Op::Forward;
  int micro_batch = -1;  // -1: the step's (ReduceGrads, OptimizerStep)
  int slot = -1;         // the stage's activation slot holding the micro-batch; -1: none
  Boundary boundary = Boundary::Inside;
  bool operator==(const Instruction& o) const {
    return op == o.op && micro_batch == o.micro_batch && slot == o.slot && boundary == o.boundary;
  }
};
// "Forward(m2,s0)", "Backward(m3,s1,last)", "OptimizerStep".
std::string to_string(const Instruction& instruction);
// A step's instructions joined by spaces.
std::string to_string(const std::vector<Instruction>& step);

class Schedule {
 public:
  Schedule(std::string name, int stages, int micro_batches, std::vector<int> slots,
           std::vector<std::vector<std::vector<Instruction>>> steps);

  const std::string& name() const { return name_; }
  int stages() const { return stages_; }
  int micro_batches() const { return micro_batches_; }
  // The activation slots stage s needs: the most micro-batches in flight there at once.
  int slots(int stage) const;
  // Stage s's steps, in order (the same count for every stage).
  const std::vector<std::vector<Instruction>>& steps(int stage) const;

 private:
  std::string name_;
  int stages_;
  int micro_batches_;
  std::vector<int> slots_;
  std::vector<std::vector<std::vector<Instruction>>> steps_;
};

// Today's gradient accumulation: one stage, one slot.
Schedule data_parallel_schedule(int micro_batches);
Schedule gpipe_schedule(int stages, int micro_batches);
Schedule one_f_one_b_schedule(int stages, int micro_batches);

}  // namespace zt::pipeline
