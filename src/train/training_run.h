// What the `zerotrain train` loop (trainer.cpp) and the Accelerator API
// (include/zerotrain/accelerator.h) share: the objects of a run built from a resolved
// config, checkpoints and evaluation. Their optimizer steps are one type,
// train/step_protocol.h, which is what makes a custom loop written with the API reproduce
// `zerotrain train` bitwise (tests/e2e/accelerator_test.cpp, tests/comm/accelerator_multirank_test.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "comm/communicator.h"
#include "comm/mesh.h"
#include "io/token_dataset.h"
#include "model/transformer.h"
#include "config/config.h"
#include "train/data_setup.h"
#include "train/lr_schedule.h"
#include "train/model_setup.h"
#include "train/output_dir_lock.h"
#include "train/step_timer.h"
#include "zero/engine.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer.h"

namespace zt::train {

struct TrainingRun {
  config::TrainConfig config;  // epoch-based runs: with the total steps filled in
  // The job's ranks as a mesh (comm/mesh.h) and the ZeRO engine over its groups: declared
  // first so that they outlive what uses them. The world group's host communicator is MPI
  // (a single-process communicator without a launcher) for host scalars, barriers and
  // checkpoint agreement; GPU runs of several ranks add a device communicator (NCCL) per
  // group for the model's buffers. Every rank is data-parallel today (no tensor, pipeline
  // or expert sizes in the config yet).
  std::unique_ptr<comm::Mesh> mesh;
  std::unique_ptr<zero::ZeroEngine> engine;
  std::filesystem::path output_dir;
  // Rank 0's lock on output_dir for the run's life (null on the other ranks).
  std::unique_ptr<OutputDirLock> output_lock;
  ModelSetup setup;  // model and tokenizer
  DataSetup data;
  int64_t micro_batch = 0, seq_len = 0, grad_accum = 0;
  int64_t windows = 0;      // training windows per epoch
  // Sequences per validation batch: eval_batch_size (else the micro-batch), at most the
  // validation windows there are; 0: no validation loss (no validation data or eval_strategy no).
  int64_t val_batch = 0;
  int64_t steps_per_epoch = 1;  // global steps over one epoch of the training windows (>= 1)
  std::string best_checkpoint;  // load_best_model_at_end: global_stepN of the best validation loss so far
  int64_t total_steps = 0;  // global steps the run takes (fp16-skipped ones included)
  std::unique_ptr<io::BatchLoader> loader;
  std::unique_ptr<zero::Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  zero::LossScaler scaler;
  // Global steps taken, DeepSpeed's global_steps: an fp16 step skipped on overflow counts
  // too (the optimizer's steps_taken() and the scaler's skipped_steps() tell them apart).
  // The ZeRO stage the engine runs: the configured one, or 0 with one process
  // (engine_stage).
  int stage = 0;
  int64_t step = 0;
  int64_t micro_steps = 0;  // forward/backward passes taken (seeds dropout)
  // wall_clock_breakdown (enable_phase_timing): the phase marks and the hooks that put
  // the forward/backward boundary in front of the engine's. Null when off.
  std::unique_ptr<PhaseTimer> timer;
  std::unique_ptr<PhaseHooks> phase_hooks;

  model::Transformer& model() const { return *setup.model; }
  // Every rank of the job: host scalars, barriers, checkpoint agreement.
  comm::Communicator& world_comm() const { return mesh->world().host(); }
  int rank() const { return mesh->rank(); }
  int world_size() const { return mesh->size(); }
  bool is_main_rank() const { return mesh->rank() == 0; }
  // This rank's data-parallel index and the data-parallel size: the data shards it reads.
  int dp_rank() const { return mesh->coords().dp; }
  int dp_size() const { return mesh->dims().dp(); }
  std::filesystem::path checkpoint_root() const { return output_dir / "checkpoints"; }
};

// The stage the ZeRO engine runs for a configured stage: stages 1-3 over one process run
// as stage 0 (every partition would be the whole model; the results are the same sums),
// unless ZT_ZERO_KEEP_STAGE=1 asks for the configured stage's machinery (tests of the
// partitioned paths on one process or one GPU). Stage 3 with parameter offload stays stage
// 3: there the partitions' home (host memory) is what saves the memory.
enum class ParamOffload { Off, On };
int engine_stage(int configured_stage, int world_size, ParamOffload params = ParamOffload::Off);

// Joins the job's ranks (comm::make_world_communicator), logs the config's warnings,
// creates output_dir, builds the model (ZeRO-3: one unit at a time, keeping only this
// rank's slices) and tokenizer, the data shards and this rank's loader, the total step
// count, the ZeRO engine, the optimizer over its partitions, schedule and loss scaler,
// and puts the model in train mode with the configured activation checkpointing.
// Does not resume (load_run_checkpoint does). BadInput names what does not fit.
std::unique_ptr<TrainingRun> start_training_run(const config::TrainConfig& config);

// Times the steps' phases from now on (run.timer; the model's hooks become PhaseHooks
// over the engine). Timing reads clocks or queues events only: the numbers are the same.
void enable_phase_timing(TrainingRun& run);

// Whether a step's gradients are checked for inf/nan (and the step skipped on one): fp16
// (the loss scaler), and bf16 with bf16.check_grad_overflow (DeepSpeed 0.19+'s default).
bool checks_overflow(const TrainingRun& run);

// Loads weights, optimizer state, step counters, data position and loss scaler from a
// checkpoint directory, or from "latest" of the run's checkpoints/ ("latest"), or of a
// checkpoint root; "auto" loads the run's latest checkpoint when there is one and returns
// "" otherwise (restarts after a failure). Any world size and ZeRO stage may have saved
// it. Returns the directory loaded.
std::string load_run_checkpoint(TrainingRun& run, const std::string& which);
// Writes <root>/global_step<step>/ (and <root>/latest), keeping config.keep_last; every
// rank writes its shard (collective). Call it between steps: accumulated gradients are
// not saved.
std::string save_run_checkpoint(TrainingRun& run, const std::string& root);

// Rank 0, at the start of a run: removes what interrupted saves of dead runs left in the
// checkpoint root and beside final/ (staging and aside directories, `latest` temporaries),
// with a warning naming each. Collective: every rank calls it (the others wait).
void remove_stale_outputs(TrainingRun& run);

// Mean loss over `batches` validation micro-batches (at most one epoch), always from the
// start of the validation order so evaluations are comparable; NaN without validation
// data. Every rank evaluates the same batches. Leaves the model in train mode.
double validation_loss(TrainingRun& run, int64_t batches);

// The mean of a value over the ranks (losses for the log).
double mean_over_ranks(TrainingRun& run, double value);

}  // namespace zt::train
