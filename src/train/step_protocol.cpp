#include "train/step_protocol.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>

#include "config/config_dump.h"
#include "core/error.h"
#include "core/fail_point.h"
#include "model/transformer.h"
#include "pipeline/schedule.h"

namespace zt::train {
namespace {

// A run that skips non-finite steps without a dynamic loss scale (bf16 with
// check_grad_overflow, fp16 with a static scale) stops after this many in a row: bf16 has
// f32's range, so such gradients are no passing overflow but NaN weights or state, which
// every later step repeats; skipping on would train nothing for the rest of the run. (A
// dynamic fp16 scale stops by itself once at its minimum.)
constexpr int64_t kMaxSkippedInARow = 3;

// Non-finite gradients that the run does not skip past: stop before the optimizer applies
// them. (Megatron-LM raises on a NaN gradient norm; DeepSpeed's bf16 and HF's Trainer
// would train on and save NaN weights.) BadInput, as fp16's "training diverged": the fix is
// in what the run was given (learning rate, weights, data, checkpoint).
[[noreturn]] void stop_on_non_finite(const TrainingRun& run, double norm, int64_t in_a_row) {
  const bool bf16 = run.config.precision == config::Precision::BF16;
  ZT_THROW_INPUT(
      "step ", run.step + 1, ": the gradients are not finite (global gradient norm ", norm, ")",
      in_a_row > 1 ? str(" in ", in_a_row, " steps in a row (each skipped)") : std::string(),
      bf16 ? " in a " : " in an ", config::precision_name(run.config.precision),
      " run: stopped before the optimizer applied them; the weights and the saved checkpoints are as "
      "before. Causes: a learning rate too high (the loss diverged), NaN/Inf in the loaded weights, checkpoint "
      "or optimizer state (a damaged NVMe swap file), or bad data. Fix: lower learning_rate (or warm up "
      "longer), check the model files, resume from an earlier checkpoint (--resume DIR)",
      bf16 && in_a_row <= 1 ? "; bf16.check_grad_overflow: true skips a step like this one, as fp16 does" : "");
}

// The gradients are checked for inf/nan through the global norm: it is inf/nan exactly
// when some gradient element is (the sum of squares propagates it, and every rank gets the
// same sum), so the one pass (one host wait) that clipping needs gives both, and every
// rank comes to the same verdict.
struct StepCheck {
  bool skipped = false;
  double unscaled_grad_norm = 0;
};

StepCheck check_step(TrainingRun& run, float loss_scale) {
  StepCheck c;
  const double norm = run.engine->grad_norm();
  const bool finite = std::isfinite(norm);
  const bool skips = checks_overflow(run);
  if (!finite && !skips) stop_on_non_finite(run, norm, 1);
  c.skipped = run.scaler.update(skips && !finite);
  if (c.skipped && !run.scaler.dynamic() && run.scaler.skipped_in_a_row() >= kMaxSkippedInARow)
    stop_on_non_finite(run, norm, run.scaler.skipped_in_a_row());
  c.unscaled_grad_norm = norm / loss_scale;
  return c;
}

// max_norm / (norm + 1e-6) when the norm exceeds max_norm > 0 (PyTorch's clip_grad_norm_), else 1.
float clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm > 0 && grad_norm > max_norm) return static_cast<float>(max_norm / (grad_norm + 1e-6));
  return 1.0f;
}

// Scheduled betas, then the optimizer step with gradients multiplied by clip / loss_scale;
// stages 1-3 then bring every rank's parameters up to date.
void apply_update(TrainingRun& run, float lr, float clip, float loss_scale) {
  if (auto betas = run.schedule->betas(run.optimizer->steps_taken()))
    run.optimizer->set_betas(betas->first, betas->second);
  run.optimizer->step(lr, clip / loss_scale);
  run.engine->after_optimizer_step();
}

}  // namespace

float next_lr(const TrainingRun& run) { return run.schedule->lr(run.optimizer->steps_taken()); }

// ---- OptimizerStep ----------------------------------------------------------------------

OptimizerStep::OptimizerStep(TrainingRun& run, Gradients start) : run_(run), scale_(run.scaler.scale()) {
  if (start == Gradients::Clear) run_.engine->zero_grads();
}

OptimizerStep::MicroBatch OptimizerStep::micro_batch() {
  ZT_CHECK(!finished_, "OptimizerStep: micro_batch() after finish()");
  ZT_CHECK(!open_, "OptimizerStep: micro_batch() while the previous micro-batch's scope is open");
  ZT_CHECK(!broken_, "OptimizerStep: micro_batch() after a micro-batch failed; start a new step");
  ZT_CHECK(done_ < run_.grad_accum, "OptimizerStep: micro-batch ", done_ + 1, " of a step of ", run_.grad_accum);
  return MicroBatch(*this);
}

double OptimizerStep::grad_norm() { return run_.engine->grad_norm() / scale_; }

StepOutcome OptimizerStep::finish(double max_norm) {
  ZT_CHECK(!finished_, "OptimizerStep: finish() twice");
  ZT_CHECK(complete(), "OptimizerStep: finish() after ", done_, " of ", run_.grad_accum, " micro-batches",
           broken_ ? " (one failed)" : "");
  finished_ = true;
  if (run_.timer) run_.timer->mark(Phase::Optimizer);
  StepOutcome out;
  const StepCheck check = check_step(run_, scale_);
  out.lr = next_lr(run_);  // before the update: the rate it uses
  if (!check.skipped) {
    out.applied = true;
    out.grad_norm = check.unscaled_grad_norm;
    apply_update(run_, out.lr, clip_coefficient(out.grad_norm, max_norm), scale_);
  }
  ++run_.step;  // a skipped step is a global step too
  if (run_.timer) run_.timer->mark(Phase::Other);
  return out;
}

// ---- MicroBatch -------------------------------------------------------------------------

OptimizerStep::MicroBatch::MicroBatch(OptimizerStep& step)
    : step_(&step), uncaught_at_start_(std::uncaught_exceptions()) {
  TrainingRun& run = step.run_;
  step.open_ = true;
  if (run.timer) run.timer->mark(Phase::Forward);
  // Each rank draws its own dropout masks (rank 0's are the single-process ones).
  run.model().set_dropout_seed(run.config.seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(run.rank())),
                               static_cast<uint64_t>(run.micro_steps));
  run.engine->begin_micro_batch(step.done_ + 1 == run.grad_accum);
}

OptimizerStep::MicroBatch::MicroBatch(MicroBatch&& other) noexcept
    : step_(other.step_), uncaught_at_start_(other.uncaught_at_start_), ran_(other.ran_), targets_(other.targets_) {
  other.step_ = nullptr;
}

float OptimizerStep::MicroBatch::start_pass(const Tensor& targets) {
  ZT_CHECK(step_ != nullptr, "MicroBatch: forward_backward() on a moved-from scope");
  ZT_CHECK(!ran_, "MicroBatch: one forward_backward() per micro-batch");
  TrainingRun& run = step_->run_;
  targets_ = model::count_targets(targets);  // host labels: no device wait
  const int64_t count = std::max<int64_t>(1, targets_);
  float grad_scale = step_->scale_ / static_cast<float>(count * run.grad_accum * run.world_size());
  // The NaN-gradient drill (core/fail_point.h): every gradient of this step NaN.
  if (nan_gradients_at(run.step + 1)) grad_scale = std::numeric_limits<float>::quiet_NaN();
  return grad_scale;
}

double OptimizerStep::MicroBatch::finish_pass(const ops::CrossEntropyResult& r) {
  ran_ = true;
  return r.loss_sum / static_cast<double>(std::max<int64_t>(1, targets_));
}

double OptimizerStep::MicroBatch::forward_backward(const Tensor& tokens, const Tensor& targets,
                                                   const Tensor& segment_starts) {
  const float grad_scale = start_pass(targets);
  return finish_pass(step_->run_.model().forward_backward(tokens, targets, grad_scale, segment_starts));
}

OptimizerStep::MicroBatch::~MicroBatch() noexcept(false) {
  if (step_ == nullptr) return;
  if (std::uncaught_exceptions() > uncaught_at_start_ || !ran_) {
    step_->open_ = false;
    step_->broken_ = true;  // no collective: the other ranks may be elsewhere
    step_ = nullptr;
    return;
  }
  end();
}

void OptimizerStep::MicroBatch::end() {
  ZT_CHECK(step_ != nullptr && ran_, "MicroBatch: end() without the pass");
  OptimizerStep& step = *step_;
  step_ = nullptr;
  step.open_ = false;
  TrainingRun& run = step.run_;
  run.engine->end_micro_batch();
  if (run.timer) run.timer->mark(Phase::Other);
  ++run.micro_steps;
  ++step.done_;
}

// ---- the step as a schedule -------------------------------------------------------------

// The data-parallel schedule's driver (pipeline/executor.h): each micro-batch in its
// MicroBatch scope, the step's finish at OptimizerStep.
class OptimizerStep::MicroBatch::Driver : public pipeline::StepDriver {
 public:
  Driver(OptimizerStep& step, const BatchSource& next, double max_norm, Result& result)
      : step_(step), next_(next), max_norm_(max_norm), result_(result) {}

  pipeline::MicroBatchData load(int m) override { return data_ = next_(m); }
  void begin_micro_batch(int m, pipeline::Boundary boundary) override {
    // The engine's `last` is the scope's own (from the count); the schedule must agree.
    ZT_CHECK((boundary == pipeline::Boundary::Last) == (m + 1 == step_.run_.grad_accum),
             "OptimizerStep: the schedule's last micro-batch is not the step's");
    micro_.emplace(step_.micro_batch());
  }
  float grad_scale(int) override { return micro_->start_pass(data_.targets); }
  void loss(int, const ops::CrossEntropyResult& r) override {
    result_.loss_sum += micro_->finish_pass(r);
    result_.targets += micro_->targets();
  }
  void end_micro_batch(int) override {
    micro_->end();  // may throw (a collective's timeout): the scope is already closed
    micro_.reset();
  }
  void reduce_grads() override {
    // Stages 0-1 reduced during the last micro-batch's backward, finished by its end.
    ZT_CHECK(step_.complete(), "OptimizerStep: ReduceGrads before the step's micro-batches are done");
  }
  void optimizer_step() override { result_.outcome = step_.finish(max_norm_); }

 private:
  OptimizerStep& step_;
  const BatchSource& next_;
  double max_norm_;
  Result& result_;
  pipeline::MicroBatchData data_;
  std::optional<MicroBatch> micro_;
};

OptimizerStep::Result OptimizerStep::run(const BatchSource& next, double max_norm) {
  ZT_CHECK(done_ == 0 && !open_ && !finished_ && !broken_, "OptimizerStep: run() on a step already begun");
  Result result;
  MicroBatch::Driver driver(*this, next, max_norm, result);
  pipeline::Executor executor(run_.model().stage(), nullptr, driver);
  executor.run(pipeline::data_parallel_schedule(static_cast<int>(run_.grad_accum)), 0);
  return result;
}

}  // namespace zt::train
