// The step protocol as a type: the one order in which an optimizer step drives the ZeRO
// engine, the model and the optimizer, for `zerotrain train` (trainer.cpp) and the
// Accelerator API (accelerator.cpp) alike:
//
//   OptimizerStep step(run);                 zero_grads (or keep them: Gradients::Keep)
//   for each of the run's grad_accum micro-batches:
//     {
//       OptimizerStep::MicroBatch mb = step.micro_batch();   begin_micro_batch(last)
//       loss += mb.forward_backward(tokens, targets);        forward + backward
//     }                                                      end_micro_batch
//   StepOutcome out = step.finish(max_norm); check_step -> next_lr -> apply_update
//                                            (unless skipped) -> after_optimizer_step
//                                            -> count_global_step
//
// check_step reads the global gradient norm (the one host wait of a step): non-finite, the
// step is skipped (fp16; bf16 with bf16.check_grad_overflow) or, in a run that does not skip
// (f32; bf16 without the check), or after 3 skipped steps in a row without a dynamic loss
// scale, finish() throws BadInput before any update: non-finite gradients never reach the
// weights, so no checkpoint saved afterwards holds them.
//
// `last` (after which stages 0-1 reduce the accumulated gradients) comes from the count of
// micro-batches, never from the caller, and finish() refuses a step that is not complete:
// a loop cannot reduce twice, reduce too early, or update on partial gradients.
//
// The same step as a schedule (pipeline/schedule.h): run() executes the data-parallel
// schedule's instructions (load, forward, backward per micro-batch, each in its MicroBatch
// scope; then reduce and step) through pipeline::Executor over the model's stage, with
// the same numbers, bit for bit, as the loop above.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "pipeline/executor.h"
#include "train/training_run.h"

namespace zt::train {

// What a step starts from: cleared gradients (every step of `zerotrain train`), or the
// ones already there (an Accelerator loop that did not call zero_grad(), as in PyTorch).
enum class Gradients { Clear, Keep };

// What finish() did.
struct StepOutcome {
  bool applied = false;             // false: inf/nan gradients, the step was skipped
  float lr = 0;                     // the scheduled rate (the update's when applied)
  double grad_norm = std::nan("");  // global norm, loss scale removed, before clipping; NaN when skipped
};

class OptimizerStep {
 public:
  explicit OptimizerStep(TrainingRun& run, Gradients start = Gradients::Clear);
  OptimizerStep(const OptimizerStep&) = delete;
  OptimizerStep& operator=(const OptimizerStep&) = delete;

  // One micro-batch's scope. Constructing it (micro_batch()) begins the micro-batch on the
  // engine; forward_backward() runs the pass, once; the destructor ends the micro-batch
  // (outstanding reductions finished, stage 3's gathered units released) and counts it.
  // An exception leaving the scope ends nothing — the other ranks may not be at this
  // point, so no collective is started — and the step can no longer be finished.
  class MicroBatch {
   public:
    MicroBatch(MicroBatch&& other) noexcept;
    MicroBatch(const MicroBatch&) = delete;
    MicroBatch& operator=(const MicroBatch&) = delete;
    MicroBatch& operator=(MicroBatch&&) = delete;
    // Ending a micro-batch waits for collectives, which can fail (a timeout): that error
    // propagates from here unless another exception is already unwinding the scope.
    ~MicroBatch() noexcept(false);

    // Forward and backward with gradients scaled by loss_scale / (target tokens x
    // grad_accum x world size) — HF semantics: each micro-batch's mean token loss divided
    // by the accumulation steps, the ranks' sum being the mean. Dropout is seeded by the
    // run's micro-step count. Returns the mean token loss (unscaled). segment_starts: packed
    // SFT samples (io::BatchLoader::next's), or undefined (model::Transformer::forward).
    double forward_backward(const Tensor& tokens, const Tensor& targets, const Tensor& segment_starts = Tensor());
    // The targets of the pass counted in the loss (labels not ignored: an SFT batch's
    // response tokens), counted on the host labels; 0 before forward_backward().
    int64_t targets() const { return targets_; }

   private:
    friend class OptimizerStep;
    class Driver;
    explicit MicroBatch(OptimizerStep& step);
    // The pass in two halves (forward_backward, and the schedule's Backward): the gradient
    // scale of the targets; then the mean token loss of its result.
    float start_pass(const Tensor& targets);
    double finish_pass(const ops::CrossEntropyResult& result);
    // What the destructor does (the micro-batch ends), called by a schedule's driver.
    void end();
    OptimizerStep* step_;  // null once moved from
    int uncaught_at_start_;
    bool ran_ = false;
    int64_t targets_ = 0;
  };

  // The next micro-batch. A step takes exactly run.grad_accum of them, one at a time;
  // asking for another (or one while a scope is open, or after finish()) is a logic error.
  MicroBatch micro_batch();

  int64_t micro_batches() const { return done_; }  // completed so far
  bool complete() const { return done_ == run_.grad_accum && !broken_; }
  bool finished() const { return finished_; }
  bool failed() const { return broken_; }  // a micro-batch's scope ended by an exception or without its pass
  // The loss scale the step's gradients carry (fixed when the step starts).
  float loss_scale() const { return scale_; }

  // The global norm of the gradients accumulated so far, loss scale removed (one pass and
  // one scalar collective; inf/nan when some gradient is).
  double grad_norm();

  // At the accumulation boundary, once: checks the gradients for inf/nan and updates the
  // loss scaler, then — unless the step is skipped — one optimizer update with the
  // scheduled lr and betas and the gradients clipped to max_norm (0: no clipping); either
  // way the global step advances (DeepSpeed's global_steps count skipped steps). Throws
  // BadInput, updating nothing, on non-finite gradients the run does not skip (above).
  StepOutcome finish(double max_norm);

  // The whole step as the data-parallel schedule: for each of the run's grad_accum
  // micro-batches `next(m)` gives its tokens, targets (and packed samples) — views valid
  // until its backward — then forward and backward in the micro-batch's scope; then
  // finish(max_norm). On a fresh step; bitwise the loop of micro_batch() scopes.
  struct Result {
    double loss_sum = 0;  // the micro-batches' mean token losses, summed
    int64_t targets = 0;  // targets counted in the loss (host labels)
    StepOutcome outcome;
  };
  using BatchSource = std::function<pipeline::MicroBatchData(int64_t micro_batch)>;
  Result run(const BatchSource& next, double max_norm);

 private:
  TrainingRun& run_;
  float scale_;
  int64_t done_ = 0;
  bool open_ = false;    // a MicroBatch scope is alive
  bool broken_ = false;  // a scope ended by an exception or without its pass
  bool finished_ = false;
};

// The learning rate of the next update: a function of the updates applied, so skipped
// steps do not advance the schedule.
float next_lr(const TrainingRun& run);

}  // namespace zt::train
