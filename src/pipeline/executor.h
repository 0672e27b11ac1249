// Runs one stage's instruction list of a Schedule (pipeline/schedule.h) over a
// model::ModelStage: one loop, the same for every schedule. What is around the stage comes
// from a StepDriver: the micro-batches' data, the ZeRO engine's micro-batch bracket
// (begin_micro_batch(last) before a micro-batch's first instruction on this stage,
// end_micro_batch after its backward), the loss scale of the last stage's backward, its
// losses, and the step (train/step_protocol.h's OptimizerStep is the driver of a training
// step). Activations and their gradients go to the neighbouring stages over the pipeline
// group (rank = stage), which a one-stage schedule does without (null).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/model_stage.h"
#include "ops/cross_entropy.h"
#include "pipeline/schedule.h"

namespace zt::pipeline {

// One micro-batch as LoadMicroBatch reads it: host (or device) i32 [B, T] views that stay
// valid until the micro-batch's backward; segment_starts undefined without packed samples.
struct MicroBatchData {
  Tensor tokens, targets, segment_starts;
};

class StepDriver {
 public:
  virtual ~StepDriver() = default;
  // LoadMicroBatch (the first and the last stage).
  virtual MicroBatchData load(int micro_batch) = 0;
  // Before the micro-batch's first instruction on this stage, and after its backward.
  virtual void begin_micro_batch(int micro_batch, Boundary boundary) = 0;
  virtual void end_micro_batch(int micro_batch) = 0;
  // The last stage's backward starts from grad_scale * the sum of the micro-batch's token
  // losses, and reports them.
  virtual float grad_scale(int micro_batch) = 0;
  virtual void loss(int micro_batch, const ops::CrossEntropyResult& result) = 0;
  virtual void reduce_grads() = 0;
  virtual void optimizer_step() = 0;
};

class Executor {
 public:
  // pipeline_group: rank s runs stage s (null: a one-stage schedule). activation_shape:
  // [B, T, C] of the hidden states the stages exchange (unused with one stage).
  Executor(model::ModelStage& stage, comm::Communicator* pipeline_group, StepDriver& driver,
           Shape activation_shape = {});
  ~Executor();

  // Runs stage `stage_index`'s steps of the schedule, in order.
  void run(const Schedule& schedule, int stage_index);

 private:
  void execute(const Instruction& i);
  void begin(const Instruction& i);
  Tensor buffer(std::vector<OwnedTensor>& buffers, int slot);
  comm::Communicator& group();
  void complete(comm::WorkPtr& send);

  model::ModelStage& stage_;
  comm::Communicator* group_;
  StepDriver& driver_;
  Shape activation_shape_;
  int stage_index_ = 0;
  std::vector<bool> begun_;                    // per micro-batch: its bracket opened on this stage
  std::vector<MicroBatchData> data_;           // per micro-batch: what LoadMicroBatch gave
  std::vector<OwnedTensor> received_, grads_;  // per slot: a received activation, a received gradient
  // Per slot: the send of its output, and of its input gradient, still in flight (or null).
  std::vector<comm::WorkPtr> output_sends_, grad_sends_;
};

}  // namespace zt::pipeline
