// The step reporter of `zerotrain train`: what a logged step and an evaluation report,
// measured once (throughput, MFU, memory, collective bytes, NVMe swap traffic, the phase
// times) and handed to every sink in turn: the step line on stdout, metrics.jsonl,
// DeepSpeed's csv_monitor and TensorBoard. A new tracker is one more StepSink; the loop
// (trainer.cpp) only says that a step or an evaluation happened. Only rank 0 reports.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/lora_setup.h"
#include "train/memory_report.h"
#include "train/metrics.h"
#include "zero/param_store.h"
#include "zero/state_store.h"
#include "zero/swap_file.h"

namespace zt::train {

struct TrainingRun;

// wall_clock_breakdown's numbers: per-step means since the last log line.
struct StepTimes {
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, comm_ms = 0;
};

// NVMe swap traffic since the last log line.
struct SwapRates {
  double read_bytes = 0, written_bytes = 0, wait_s = 0;
};

// One logged step, as every sink reports it.
struct StepRecord {
  int64_t step = 0, total_steps = 0;
  double loss = 0;
  float lr = 0;
  double grad_norm = 0;  // NaN: not computed
  float loss_scale = 1;
  bool loss_scaler = false;  // fp16's dynamic scaler runs (DeepSpeed's monitor logs the scale then)
  double tokens_per_s = 0, mfu = 0;
  int64_t rss_bytes = 0;
  bool gpu = false;  // the GPU is in use: its allocator's peak is reported
  size_t gpu_peak_bytes = 0;
  double elapsed_s = 0, eta_s = 0;
  double comm_bytes_per_step = 0;  // this rank's collectives (ring-algorithm accounting)
  bool comm_shown = false;         // several ranks: the line says it (metrics always have it)
  bool skipped = false;            // fp16 overflow
  int64_t skipped_steps = 0;       // so far
  int64_t target_tokens = 0;       // tokens whose label is not masked
  bool targets_shown = false;      // SFT data (masked labels): the line says them
  int64_t samples = 0;             // sequences trained on so far (DeepSpeed's monitors' x axis)
  int64_t steps = 1;               // since the last log line (the means' count)
  double seconds = 0;              // since the last log line
  std::optional<SwapRates> nvme;
  std::optional<StepTimes> times;
  std::optional<MemoryBreakdown> memory;
};

struct EvalRecord {
  int64_t step = 0, total_steps = 0;
  double val_loss = 0;
  bool skipped = false;
};

class StepSink {
 public:
  virtual ~StepSink() = default;
  virtual void step(const StepRecord& r) = 0;
  virtual void evaluation(const EvalRecord& r) = 0;
};

// The step line (and wall_clock_breakdown's and memory_breakdown's lines) on `out`.
std::unique_ptr<StepSink> console_sink(std::FILE* out);
// metrics.jsonl: one JSON object per step line and per evaluation.
std::unique_ptr<StepSink> metrics_sink(const std::string& path, bool append);
// ds_config csv_monitor: DeepSpeed's tags against the samples seen; no evaluations.
std::unique_ptr<StepSink> csv_sink(const std::string& dir);
// report_to tensorboard: HF Trainer's tags at the step (and eval/loss), or DeepSpeed's
// monitor's tags against the samples seen (no evaluations).
std::unique_ptr<StepSink> tensorboard_sink(const std::string& dir, config::TrainConfig::TensorBoardTags tags);

// The FLOPs MFU counts per token and the peak it divides by.
struct MfuBasis {
  LoraTrained lora;  // a LoRA run's trained parameters (empty otherwise)
  double flops_per_token = 0;
  PeakFlops peak;
};

class StepReporter {
 public:
  // Rank 0 opens metrics.jsonl (appended to when resuming), then works out the MFU basis
  // (on a GPU its table does not list, a GEMM measured now).
  explicit StepReporter(TrainingRun& run);
  const MfuBasis& mfu() const { return mfu_; }
  // Opens the trackers (TensorBoard, the CSV monitor) and starts the clocks: the elapsed
  // time and ETA count from here, so a resumed run's rate is its own steps'.
  void start();
  // A micro-batch of every rank ran.
  void micro_batch_done();
  // Step run.step ended; rank 0 reports it every steps_per_print steps, at the last step
  // and at every skipped one.
  void step_done(double loss, float lr, double grad_norm, float loss_scale, bool skipped, int64_t target_tokens,
                 bool last);
  // Rank 0 reports a validation loss.
  void evaluation(double val_loss, bool skipped);

 private:
  StepRecord measure(double seconds);
  zero::SwapTraffic nvme_traffic() const;

  TrainingRun& run_;
  bool main_rank_;
  MfuBasis mfu_;
  std::vector<std::unique_ptr<StepSink>> sinks_;  // in reporting order
  std::chrono::steady_clock::time_point t_start_, t_last_;
  int64_t first_step_ = 0, tokens_since_log_ = 0, steps_since_log_ = 0;
  // The NVMe swaps, when there are any (the optimizer state's, the parameters').
  const zero::NvmeStore* state_swap_ = nullptr;
  const zero::ParamStore* param_swap_ = nullptr;
  zero::SwapTraffic nvme_last_;
};

}  // namespace zt::train
