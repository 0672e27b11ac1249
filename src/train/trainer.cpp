#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/fail_point.h"
#include "core/log.h"
#include "core/parallel.h"
#include "config/config_dump.h"
#include "train/checkpoint_policy.h"
#include "train/evaluator.h"
#include "train/final_export.h"
#include "train/memory_report.h"
#include "train/signals.h"
#include "train/step_protocol.h"
#include "train/step_reporter.h"
#include "train/training_run.h"

namespace zt::train {

namespace {

// The model-state bytes per rank, next to what the ZeRO paper's formula predicts.
void log_memory_plan(TrainingRun& run) {
  const zero::ZeroEngine& e = *run.engine;
  const zero::ModelStateBytes m = e.memory(static_cast<int64_t>(run.optimizer->state_bytes()));
  ZT_INFO("ZeRO stage ", e.stage(), " over ", e.world_size(), " rank", e.world_size() == 1 ? "" : "s", " (",
          run.world_comm().backend_name(), "), overlap_comm ",
          e.options().overlap_comm == zero::OverlapComm::On ? "on" : "off", "; per rank: parameters ",
          human_bytes(static_cast<double>(m.params)), ", gradients ", human_bytes(static_cast<double>(m.grads)),
          ", optimizer state ", human_bytes(static_cast<double>(m.optimizer)), " = ",
          human_bytes(static_cast<double>(m.model_states())));
}

// The run's first lines: model, data, LoRA, memory plan, threads and the MFU peak; then
// wall_clock_breakdown's timing and memory_breakdown's first line on rank 0.
void log_run_start(TrainingRun& run, const MfuBasis& mfu) {
  const config::TrainConfig& c = run.config;
  const model::Transformer& model = run.model();
  const model::ModelConfig& mc = model.config();
  ZT_INFO("model: ", mc.model_type, ", ", mc.num_parameters(), " parameters (", mc.num_layers, " layers, width ",
          mc.hidden_size, "), ", config::precision_name(c.precision),
          c.optimizer.master_weights == zero::MasterWeights::None ? " (no master weights: bf16 optimizer state)" : "",
          ", activation checkpointing ", c.model.activation_checkpointing ? "on" : "off");
  ZT_INFO("data: ", run.windows, " windows of ", run.seq_len, " tokens; batch ", c.train_batch_size, " = micro ",
          run.micro_batch, " x accumulation ", run.grad_accum, " x world ", c.world_size, "; ", run.total_steps,
          " steps; lr ", run.schedule->describe());
  if (run.setup.lora) {
    const LoraTrained& lora = mfu.lora;
    ZT_INFO("LoRA: r ", run.setup.lora->r, ", scaling ", run.setup.lora->scaling(), " on ",
            model.options().lora.target_modules.size(), " module(s) per layer; ", lora.adapters, " adapter parameters",
            lora.copies > 0 ? str(" and ", lora.copies, " in trained copies (bias, modules_to_save)") : "",
            " train, the base is frozen (", c.lora_source, "); MFU counts ", mfu.flops_per_token / 1e6,
            " MFLOP per token (4 per base weight: no weight gradients, + attention, + 6 per adapter parameter",
            lora.head_copy > 0 ? ", + 2 per element of the head's copy: its weight gradient" : "", ")");
  }
  log_memory_plan(run);
  ZT_INFO(cpu_description(), ", ", num_threads(), " threads per rank");
  ZT_INFO("MFU against ", mfu.peak.describe());
  if (c.wall_clock_breakdown && run.is_main_rank()) enable_phase_timing(run);  // rank 0 prints it
  if (c.memory_breakdown && run.is_main_rank()) {
    std::printf("%s\n", memory_breakdown(run).line().c_str());
    std::fflush(stdout);
  }
}

// Rank 0's samples in the step just taken (SFT samples padded per window), named as the
// start-up check names them ("SHARD, sample K"), for the warning about a step without
// targets: its windows are the last grad_accum global batches before the loader's position.
std::string step_samples(const TrainingRun& run) {
  const io::BatchLoader& loader = *run.loader;
  const int64_t global = run.micro_batch * run.world_size();
  const int64_t end = static_cast<int64_t>(loader.state().position);
  std::string names;
  int64_t named = 0;
  for (int64_t base = std::max<int64_t>(0, end - run.grad_accum * global); base < end; base += global) {
    for (int64_t b = 0; b < run.micro_batch && named < 5; ++b, ++named) {
      const auto [shard, start] = loader.window(base + b);
      const std::string& path = run.data.train_shards[static_cast<size_t>(shard)];
      const std::unique_ptr<io::TokenShard> file = io::open_token_shard(path);
      const std::vector<int64_t>& starts = file->sample_starts();
      const int64_t k = std::lower_bound(starts.begin(), starts.end(), start) - starts.begin();
      names += (names.empty() ? "" : "; ") + path + ", sample " + std::to_string(k);
    }
  }
  return names;
}

// What one global step gives the loop.
struct StepNumbers {
  double loss = 0;  // mean over the micro-batches and the ranks
  float loss_scale = 1;
  int64_t targets = 0;  // over the ranks
  StepOutcome outcome;
};

// The global steps of the loop: each one's micro-batches with gradient accumulation, then
// the update (or the skip on fp16 overflow) through the step protocol.
class TrainSteps {
 public:
  explicit TrainSteps(TrainingRun& run)
      : run_(run),
        tok_({run.micro_batch, run.seq_len}, DType::I32),
        tgt_({run.micro_batch, run.seq_len}, DType::I32),
        seg_(run.loader->packs_samples() ? OwnedTensor({run.micro_batch, run.seq_len}, DType::I32) : OwnedTensor()),
        masked_labels_(run.loader->samples() > 0) {}

  // Step run.step + 1, or nullopt when a stop signal came between its micro-batches: a long
  // accumulation must not outlast a stop signal, so the ranks agree between micro-batches
  // (one scalar collective each; none with one process) and stop there, without the update.
  // The accumulated gradients are not part of a checkpoint, so the partial step is dropped:
  // the data position and micro-step count go back to the step's start (dropped() says so).
  std::optional<StepNumbers> next(const StopSignals& signals, const FaultInjector& drills, StepReporter& reporter) {
    TrainingRun& run = run_;
    OptimizerStep opt_step(run);
    StepNumbers n;
    n.loss_scale = opt_step.loss_scale();
    double loss_sum = 0;
    const io::LoaderState data_at_start = run.loader->state();
    const int64_t micro_at_start = run.micro_steps;
    int64_t targets = 0;  // this rank's targets counted in the loss (host labels)
    for (int64_t m = 0; m < run.grad_accum; ++m) {
      if (m > 0) {
        drills.at(TrainPoint::BeforeMicroBatch, run.step + 1, m);
        if (comm::any_rank(run.world_comm(), signals.requested())) {
          run.loader->restore(data_at_start);
          run.micro_steps = micro_at_start;
          stopped_at_micro_ = m;
          return std::nullopt;
        }
      }
      run.loader->next(tok_, tgt_, seg_);
      {
        OptimizerStep::MicroBatch micro = opt_step.micro_batch();
        loss_sum += micro.forward_backward(tok_, tgt_, seg_);
        targets += micro.targets();
      }  // the micro-batch ends here (stages 0-1 reduce after the step's last one)
      reporter.micro_batch_done();
    }
    n.loss = mean_over_ranks(run, loss_sum / static_cast<double>(run.grad_accum));
    // Every target counts in plain text: only masked labels need the ranks' sum (a host
    // scalar, no device wait).
    n.targets = masked_labels_ ? std::llround(comm::sum_over_ranks(run.world_comm(), static_cast<double>(targets)))
                               : targets * run.world_size();
    if (masked_labels_ && n.targets == 0 && run.is_main_rank()) warn_no_targets();
    // A skipped step leaves the schedule where it is, and counts as a global step.
    n.outcome = opt_step.finish(run.config.gradient_clipping);
    return n;
  }

  // What the stop between micro-batches dropped, for its message.
  std::string dropped() const {
    return " during step " + std::to_string(run_.step + 1) + " (before micro-batch " +
           std::to_string(stopped_at_micro_) + " of " + std::to_string(run_.grad_accum) +
           "; that step's partial gradients were dropped)";
  }

 private:
  // SFT data: a step without any target (its loss and gradient are 0) trains nothing; the
  // first few are said.
  void warn_no_targets() {
    constexpr int64_t kSaid = 3;
    if (steps_without_targets_++ >= kSaid) return;
    const TrainingRun& run = run_;
    ZT_WARN("step ", run.step + 1, ": no token of its batch is a target (every label is masked: ",
            run.config.data.packing
                ? std::string("its windows hold prompt tokens only")
                : str("the responses of its samples (", step_samples(run), run.world_size() > 1 ? " on rank 0" : "",
                      ") lie past data.seq_len ", run.seq_len, "; the data warning at start-up names the records"),
            "), so it trains nothing", steps_without_targets_ == kSaid ? " (further such steps are not said)" : "");
  }

  TrainingRun& run_;
  OwnedTensor tok_, tgt_;
  const OwnedTensor seg_;  // packed SFT samples: each token's sample start
  const bool masked_labels_;
  int64_t steps_without_targets_ = 0, stopped_at_micro_ = 0;
};

}  // namespace

TrainResult run_training(const config::TrainConfig& config) {
  TrainResult result;
  const std::unique_ptr<TrainingRun> run_ptr = start_training_run(config);
  TrainingRun& run = *run_ptr;
  const config::TrainConfig& c = run.config;
  remove_stale_outputs(run);
  // The checkpoint this run resumed from already holds its starting state.
  const std::string resumed_from = c.resume.empty() ? "" : load_run_checkpoint(run, c.resume);
  StepReporter reporter(run);  // rank 0 opens metrics.jsonl
  log_run_start(run, reporter.mfu());
  StopSignals signals(StopOptions{c.stop_grace_seconds});
  // Failure drills of the tests (core/fail_point.h); nothing unless the environment asks.
  const FaultInjector drills(run.rank());
  CheckpointPolicy checkpoints(run, signals, drills, resumed_from);
  Evaluator evaluator(run);
  reporter.start();
  TrainSteps steps(run);
  // Every iteration is one global step, applied or skipped on fp16 overflow (DeepSpeed's
  // global_steps), so max_steps counts skipped steps and step numbers never repeat.
  while (run.step < run.total_steps) {
    const std::optional<StepNumbers> s = steps.next(signals, drills, reporter);
    if (!s) {
      checkpoints.stop(steps.dropped(), evaluator.best_step());
      break;
    }
    const bool skipped = !s->outcome.applied;
    result.losses.push_back(s->loss);
    const bool last = run.step >= run.total_steps;
    reporter.step_done(s->loss, s->outcome.lr, s->outcome.grad_norm, s->loss_scale, skipped, s->targets, last);
    // Evaluation and checkpoints follow the global step, skipped or not: a skipped step
    // leaves a consistent state (weights as before; scaler and counters advanced).
    evaluator.after_step(last, skipped, reporter);
    drills.at(TrainPoint::StepDone, run.step);
    // Every rank stops at the same step (a signal may reach only some of them).
    const bool stop = comm::any_rank(run.world_comm(), signals.requested());
    checkpoints.after_step(last, evaluator.best_step());
    if (stop) {
      checkpoints.stop("", evaluator.best_step());
      break;
    }
    if (evaluator.stops_early(last)) {
      checkpoints.early_stop(evaluator.best_step());
      result.early_stopped = true;
      break;
    }
  }
  result.best_step = evaluator.best_step();
  result.steps = run.step;
  result.skipped_steps = run.scaler.skipped_steps();
  result.optimizer_steps = run.optimizer->steps_taken();
  result.final_val_loss = evaluator.last_val_loss();
  result.stopped_by_signal = checkpoints.stopped();
  result.last_checkpoint = checkpoints.last_checkpoint();
  if (!result.stopped_by_signal) {
    // load_best_model_at_end: the weights of the best checkpoint go to final/ (the counters
    // above are the run's own).
    evaluator.load_best_model();
    FinalExport exported = export_final(run, checkpoints.final_model(), result.last_checkpoint, signals, drills);
    result.final_model_dir = exported.model_dir;
    result.samples = std::move(exported.samples);
  }
  return result;
}

}  // namespace zt::train
