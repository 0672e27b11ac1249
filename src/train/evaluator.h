// The evaluator of `zerotrain train`: when to evaluate (eval_strategy), the validation
// loss, and HF Trainer's bookkeeping around it: the best model (load_best_model_at_end,
// metric_for_best_model, greater_is_better) and EarlyStoppingCallback's patience.
#pragma once
#include <cstdint>
#include <limits>

#include "config/config.h"

namespace zt::train {

struct TrainingRun;
class StepReporter;

// The best validation metric so far, the step it was measured at, and the evaluations
// since the last improvement larger than the threshold (HF's EarlyStoppingCallback).
class BestMetric {
 public:
  BestMetric(bool greater_is_better, int64_t patience, double threshold)
      : greater_is_better_(greater_is_better), patience_(patience), threshold_(threshold) {}
  // An evaluation's metric at `step` (every rank the same value).
  void observe(double metric, int64_t step);
  // Whether the patience ran out (never with patience 0).
  bool patience_exhausted() const { return patience_ > 0 && evals_without_improvement_ >= patience_; }
  bool has_best() const { return best_step_ >= 0; }
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }  // -1: nothing evaluated
  int64_t evals_without_improvement() const { return evals_without_improvement_; }

 private:
  bool greater_is_better_;
  int64_t patience_;
  double threshold_;
  double best_ = 0;
  int64_t best_step_ = -1, evals_without_improvement_ = 0;
};

// Whether global step `step` evaluates: every eval_interval steps (or at every epoch's last
// step) and at the last one, unless eval_strategy is no.
bool evaluation_due(const config::TrainConfig& c, int64_t steps_per_epoch, int64_t step, bool last);

class Evaluator {
 public:
  explicit Evaluator(TrainingRun& run);
  // After step run.step (skipped on fp16 overflow or not): evaluates when due, every rank
  // the same batches and the same decision; rank 0 reports the loss.
  void after_step(bool last, bool skipped, StepReporter& reporter);
  // Early stopping ends the run now (rank 0 says why).
  bool stops_early(bool last) const;
  int64_t best_step() const { return best_.best_step(); }
  // Rank 0's last validation loss (NaN: none measured, or another rank).
  double last_val_loss() const { return last_val_loss_; }
  // load_best_model_at_end: the best checkpoint's weights replace the model's (for final/),
  // unless the model is the best already.
  void load_best_model();

 private:
  TrainingRun& run_;
  BestMetric best_;
  double last_val_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace zt::train
