#include "train/checkpoint_policy.h"

#include <cstdio>

#include "core/fail_point.h"
#include "train/signals.h"
#include "train/training_run.h"

namespace zt::train {

FinalModel final_model(int engine_stage, int world_size, bool gather_16bit_weights_on_save, bool lora) {
  return engine_stage < 3 || world_size == 1 || gather_16bit_weights_on_save || lora ? FinalModel::Written
                                                                                     : FinalModel::CheckpointOnly;
}

bool save_due(const config::TrainConfig& c, int64_t steps_per_epoch, FinalModel final, int64_t step, bool last) {
  // save_strategy epoch: at every epoch's last step (HF's on_epoch_end).
  const int64_t every = c.checkpoint_saves == config::CheckpointSaves::Epoch ? steps_per_epoch : c.save_interval;
  return (c.checkpoint_saves != config::CheckpointSaves::None && ((every > 0 && step % every == 0) || last)) ||
         (last && final == FinalModel::CheckpointOnly);
}

CheckpointPolicy::CheckpointPolicy(TrainingRun& run, StopSignals& signals, const FaultInjector& drills,
                                   const std::string& resumed_from)
    : run_(run),
      signals_(signals),
      drills_(drills),
      final_(train::final_model(run.engine->stage(), run.world_size(),
                                run.config.zero.stage3_gather_16bit_weights_on_model_save,
                                run.setup.lora.has_value())) {
  if (resumed_from.empty()) return;
  saved_step_ = run.step;
  saved_dir_ = resumed_from;
  signals.saved(resumed_from, run.step);
}

void CheckpointPolicy::save(int64_t best_step) {
  const int64_t step = run_.step;
  // The step just evaluated as the best: its checkpoint is the one rotation keeps.
  if (run_.config.load_best_model_at_end && best_step == step)
    run_.best_checkpoint = "global_step" + std::to_string(step);
  signals_.saving(step);
  drills_.at(TrainPoint::Save, step);
  last_checkpoint_ = save_run_checkpoint(run_, run_.checkpoint_root().string());
  saved_step_ = step;
  saved_dir_ = last_checkpoint_;
  signals_.saved(saved_dir_, step);
}

void CheckpointPolicy::after_step(bool last, int64_t best_step) {
  if (save_due(run_.config, run_.steps_per_epoch, final_, run_.step, last)) save(best_step);
}

void CheckpointPolicy::stop(const std::string& during, int64_t best_step) {
  const int64_t step = run_.step;
  if (saved_step_ != step) save(best_step);
  // A rank the signal did not reach stops because another one asked (any_rank).
  const std::string what = signals_.signal() != 0 ? "received signal " + std::to_string(signals_.signal())
                                                  : "stopping with the other ranks (a stop signal reached one of them)";
  std::printf("%s%s: saved %s at step %lld; resume with --resume latest\n", what.c_str(), during.c_str(),
              saved_dir_.c_str(), static_cast<long long>(step));
  std::fflush(stdout);
  last_checkpoint_ = saved_dir_;
  stopped_ = true;
}

void CheckpointPolicy::early_stop(int64_t best_step) {
  if (saved_step_ != run_.step && run_.config.checkpoint_saves != config::CheckpointSaves::None) save(best_step);
}

}  // namespace zt::train
