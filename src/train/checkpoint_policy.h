// The checkpoint policy of `zerotrain train`: when the loop saves (save_strategy and
// save_interval, the last step, a stop signal, early stopping), what a save tells the
// signal handler (train/signals.h), and which checkpoint a stop names. Writing and
// rotating a checkpoint (keep_last / save_total_limit, the best one kept) is
// save_run_checkpoint's (training_run.h); resuming is load_run_checkpoint's.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"

namespace zt {
class FaultInjector;
}  // namespace zt

namespace zt::train {

struct TrainingRun;
class StopSignals;

// Whether the run ends with final/: ZeRO-3 writes a full model only with
// stage3_gather_16bit_weights_on_model_save, as DeepSpeed does (the checkpoint then is the
// result: zerotrain consolidate), and a LoRA run's final/ is its adapters, gathered alone
// (small): written at every stage, as HF's Trainer saves a PEFT model's adapter under ZeRO-3.
enum class FinalModel { Written, CheckpointOnly };
FinalModel final_model(int engine_stage, int world_size, bool gather_16bit_weights_on_save, bool lora);

// Whether global step `step` saves on schedule: every save_interval steps (or at every
// epoch's last step) and at the last one, unless save_strategy is no; and the last step of
// a run with no final/, whose checkpoint is its result, even with save_strategy no.
bool save_due(const config::TrainConfig& c, int64_t steps_per_epoch, FinalModel final, int64_t step, bool last);

class CheckpointPolicy {
 public:
  // `resumed_from`: the checkpoint the run loaded its starting state from ("" for none),
  // which counts as saved at the starting step.
  CheckpointPolicy(TrainingRun& run, StopSignals& signals, const FaultInjector& drills,
                   const std::string& resumed_from);
  FinalModel final_model() const { return final_; }
  // After step run.step: the scheduled save. `best_step`: the step of the best validation
  // loss, whose checkpoint rotation keeps (load_best_model_at_end).
  void after_step(bool last, int64_t best_step);
  // A stop signal (on any rank): saves the last complete step unless it is on disk, and
  // says where it is; `during` tells what was dropped ("" after a complete step).
  void stop(const std::string& during, int64_t best_step);
  // Early stopping: saves the step it stops at (unless saved, or save_strategy is no).
  void early_stop(int64_t best_step);
  bool stopped() const { return stopped_; }
  // The newest checkpoint this run wrote (after a stop: the one it names).
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  void save(int64_t best_step);

  TrainingRun& run_;
  StopSignals& signals_;
  const FaultInjector& drills_;
  FinalModel final_;
  // The newest state on disk: the checkpoint resumed from, then each one saved.
  int64_t saved_step_ = -1;  // -1: none yet
  std::string saved_dir_, last_checkpoint_;
  bool stopped_ = false;
};

}  // namespace zt::train
