#include "train/evaluator.h"

#include <cmath>
#include <string>

#include "core/log.h"
#include "train/step_reporter.h"
#include "train/training_run.h"

namespace zt::train {

void BestMetric::observe(double metric, int64_t step) {
  const bool have_best = has_best();
  const bool better = !have_best || (greater_is_better_ ? metric > best_ : metric < best_);
  if (!have_best || (better && std::fabs(metric - best_) > threshold_))
    evals_without_improvement_ = 0;
  else
    ++evals_without_improvement_;
  if (better) best_ = metric, best_step_ = step;
}

bool evaluation_due(const config::TrainConfig& c, int64_t steps_per_epoch, int64_t step, bool last) {
  // eval_strategy epoch: at every epoch's last step (HF's on_epoch_end).
  const int64_t every = c.evaluations == config::Evaluations::Epoch ? steps_per_epoch : c.eval_interval;
  return c.evaluations != config::Evaluations::None && ((every > 0 && step % every == 0) || last);
}

Evaluator::Evaluator(TrainingRun& run)
    : run_(run),
      best_(run.config.greater_is_better, run.config.early_stopping_patience, run.config.early_stopping_threshold) {}

void Evaluator::after_step(bool last, bool skipped, StepReporter& reporter) {
  const int64_t step = run_.step;
  if (!evaluation_due(run_.config, run_.steps_per_epoch, step, last)) return;
  const double vl = validation_loss(run_, run_.config.eval_batches);
  if (std::isnan(vl)) return;
  best_.observe(mean_over_ranks(run_, vl), step);  // the same decision on every rank
  if (!run_.is_main_rank()) return;
  last_val_loss_ = vl;
  reporter.evaluation(vl, skipped);
}

bool Evaluator::stops_early(bool last) const {
  if (!best_.patience_exhausted() || last) return false;
  const config::TrainConfig& c = run_.config;
  if (run_.is_main_rank())
    ZT_INFO("early stopping at step ", run_.step, ": ", best_.evals_without_improvement(),
            " evaluations without a validation loss better than ", best_.best(), " (step ", best_.best_step(),
            ") by more than ", c.early_stopping_threshold, " (early_stopping_patience ", c.early_stopping_patience,
            ")");
  return true;
}

void Evaluator::load_best_model() {
  if (!run_.config.load_best_model_at_end || run_.best_checkpoint.empty() || best_.best_step() == run_.step) return;
  const std::string best_dir = (run_.checkpoint_root() / run_.best_checkpoint).string();
  load_run_checkpoint(run_, best_dir);
  if (run_.is_main_rank())
    ZT_INFO("load_best_model_at_end: the final model is ", best_dir, " (validation loss ", best_.best(), " at step ",
            best_.best_step(), ")");
}

}  // namespace zt::train
