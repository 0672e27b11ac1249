#include "train/step_reporter.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "backend/cuda_api.h"
#include "core/env_vars.h"
#include "core/log.h"
#include "train/csv_monitor.h"
#include "train/gemm_peak.h"
#include "train/tensorboard.h"
#include "train/training_run.h"
#include "zero/offload_optimizer.h"
#include "zero/param_store.h"

namespace zt::train {
using nlohmann::json;

namespace {

class ConsoleSink final : public StepSink {
 public:
  explicit ConsoleSink(std::FILE* out) : out_(out) {}

  void step(const StepRecord& r) override {
    const std::string gpu = r.gpu ? " | gpu peak " + human_bytes(static_cast<double>(r.gpu_peak_bytes)) : "";
    const std::string timing = " | " + human_duration(r.elapsed_s) + " elapsed, ETA " + human_duration(r.eta_s);
    const std::string comm = r.comm_shown ? " | comm " + human_bytes(r.comm_bytes_per_step) + "/step" : "";
    std::string swap;
    if (r.nvme) {
      const double n = static_cast<double>(r.steps);
      char buf[160];
      std::snprintf(buf, sizeof buf, " | nvme r %.2f w %.2f GB/s, waited %.2f s/step",
                    r.nvme->read_bytes / r.seconds / 1e9, r.nvme->written_bytes / r.seconds / 1e9, r.nvme->wait_s / n);
      swap = buf;
    }
    std::fprintf(out_,
                 "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %7.4f | scale %g | %8.0f tok/s | MFU %5.1f%% | "
                 "mem %s%s%s%s%s",
                 static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss, r.lr, r.grad_norm,
                 r.loss_scale, r.tokens_per_s, 100.0 * r.mfu, human_bytes(static_cast<double>(r.rss_bytes)).c_str(),
                 gpu.c_str(), timing.c_str(), comm.c_str(), swap.c_str());
    if (r.targets_shown) std::fprintf(out_, " | targets %lld", static_cast<long long>(r.target_tokens));
    if (r.skipped) std::fprintf(out_, " | overflow: skipped (%lld so far)", static_cast<long long>(r.skipped_steps));
    std::fprintf(out_, "\n");
    // DeepSpeed's wall_clock_breakdown line; comm is the host time blocked in the engine's
    // collectives, inside the phases it happened in.
    if (r.times)
      std::fprintf(out_, "time (ms/step, mean of %lld) | fwd: %.2f | bwd: %.2f | step: %.2f | comm: %.2f\n",
                   static_cast<long long>(r.steps), r.times->forward_ms, r.times->backward_ms, r.times->optimizer_ms,
                   r.times->comm_ms);
    if (r.memory) std::fprintf(out_, "%s\n", r.memory->line().c_str());
    std::fflush(out_);
  }

  void evaluation(const EvalRecord& r) override {
    std::fprintf(out_, "step %6lld/%lld | val loss %.4f | val ppl %.2f\n", static_cast<long long>(r.step),
                 static_cast<long long>(r.total_steps), r.val_loss, std::exp(r.val_loss));
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
};

class MetricsSink final : public StepSink {
 public:
  MetricsSink(const std::string& path, bool append) : file_(path, append) {}

  void step(const StepRecord& r) override {
    json record = {{"step", r.step},
                   {"loss", r.loss},
                   {"lr", r.lr},
                   {"grad_norm", std::isnan(r.grad_norm) ? json(nullptr) : json(r.grad_norm)},
                   {"loss_scale", r.loss_scale},
                   {"tokens_per_s", r.tokens_per_s},
                   {"mfu", r.mfu},
                   {"rss_bytes", r.rss_bytes},
                   {"comm_bytes_per_step", r.comm_bytes_per_step},
                   {"skipped", r.skipped},
                   {"skipped_steps", r.skipped_steps},
                   {"target_tokens", r.target_tokens},
                   {"elapsed_s", r.elapsed_s},
                   {"eta_s", r.eta_s},
                   {"gpu_peak_bytes", r.gpu ? json(r.gpu_peak_bytes) : json(nullptr)}};
    if (r.nvme) {
      const double n = static_cast<double>(r.steps);
      record["nvme"] = {{"read_bytes_per_step", r.nvme->read_bytes / n},
                        {"written_bytes_per_step", r.nvme->written_bytes / n},
                        {"wait_s_per_step", r.nvme->wait_s / n}};
    }
    if (r.times)
      record["time_ms"] = {{"fwd", r.times->forward_ms},
                           {"bwd", r.times->backward_ms},
                           {"step", r.times->optimizer_ms},
                           {"comm", r.times->comm_ms}};
    if (r.memory) record["memory"] = r.memory->to_json();
    file_.write(record);
  }

  void evaluation(const EvalRecord& r) override {
    file_.write(
        {{"step", r.step}, {"val_loss", r.val_loss}, {"val_ppl", std::exp(r.val_loss)}, {"skipped", r.skipped}});
  }

 private:
  MetricsFile file_;
};

// DeepSpeed's engine: its monitors' tags, against the samples seen so far.
template <class Writer>
void deepspeed_events(Writer& w, const StepRecord& r) {
  w.scalar("Train/Samples/train_loss", r.loss, r.samples);
  w.scalar("Train/Samples/lr", r.lr, r.samples);
  if (r.loss_scaler) w.scalar("Train/Samples/loss_scale", r.loss_scale, r.samples);
  w.flush();
}

class CsvSink final : public StepSink {
 public:
  explicit CsvSink(const std::string& dir) : csv_(dir) { ZT_INFO("csv_monitor: ", csv_.dir()); }
  void step(const StepRecord& r) override { deepspeed_events(csv_, r); }
  void evaluation(const EvalRecord&) override {}

 private:
  CsvMonitor csv_;
};

class TensorBoardSink final : public StepSink {
 public:
  TensorBoardSink(const std::string& dir, config::TrainConfig::TensorBoardTags tags) : tb_(dir), tags_(tags) {
    ZT_INFO("report_to tensorboard: ", tb_.path());
  }

  void step(const StepRecord& r) override {
    if (tags_ == config::TrainConfig::TensorBoardTags::DeepSpeed) {
      deepspeed_events(tb_, r);
      return;
    }
    for (const auto& [tag, value] : std::initializer_list<std::pair<const char*, double>>{
             {"train/loss", r.loss},
             {"train/learning_rate", r.lr},
             {"train/grad_norm", r.grad_norm},
             {"train/loss_scale", r.loss_scale},
             {"train/tokens_per_second", r.tokens_per_s},
             {"train/mfu", r.mfu},
             {"train/memory_bytes", static_cast<double>(r.rss_bytes)}})
      if (std::isfinite(value)) tb_.scalar(tag, value, r.step);
    tb_.flush();
  }

  void evaluation(const EvalRecord& r) override {
    if (tags_ != config::TrainConfig::TensorBoardTags::Hf) return;
    tb_.scalar("eval/loss", r.val_loss, r.step);
    tb_.flush();
  }

 private:
  TensorBoardWriter tb_;
  config::TrainConfig::TensorBoardTags tags_;
};

// The MFU denominator of this run's device and precision, always known: the table's peak,
// or on a GPU it does not list (or with ZT_PEAK_TFLOPS=measure) a dense GEMM in the run's
// compute dtype measured now.
PeakFlops run_peak(const config::TrainConfig& c) {
  const PeakPrecision p = c.precision == config::Precision::F32 ? PeakPrecision::F32 : PeakPrecision::Sixteen;
  if (c.device != "cuda") return peak_flops(ComputeDevice::CPU, "", p);
  const std::string name = cuda::device_info(cuda::current_device()).name;
  const bool force = env_equals(EnvVar::PeakTflops, "measure");
  if (!force) {
    const PeakFlops table = peak_flops(ComputeDevice::GPU, name, p);
    if (table.known()) return table;
  }
  const DType dt = storage_dtype(c.precision);
  return {measure_gemm_flops(dt), str(name, ", measured: dense ", dtype_name(dt), " GEMM 8192^3 at start")};
}

}  // namespace

std::unique_ptr<StepSink> console_sink(std::FILE* out) { return std::make_unique<ConsoleSink>(out); }
std::unique_ptr<StepSink> metrics_sink(const std::string& path, bool append) {
  return std::make_unique<MetricsSink>(path, append);
}
std::unique_ptr<StepSink> csv_sink(const std::string& dir) { return std::make_unique<CsvSink>(dir); }
std::unique_ptr<StepSink> tensorboard_sink(const std::string& dir, config::TrainConfig::TensorBoardTags tags) {
  return std::make_unique<TensorBoardSink>(dir, tags);
}

StepReporter::StepReporter(TrainingRun& run) : run_(run), main_rank_(run.is_main_rank()) {
  const config::TrainConfig& c = run.config;
  // One writer: rank 0 (another rank opening it would truncate it under rank 0).
  if (main_rank_) {
    sinks_.push_back(console_sink(stdout));
    sinks_.push_back(metrics_sink((run.output_dir / "metrics.jsonl").string(), !c.resume.empty()));
  }
  // What trains: every weight, or a LoRA run's adapters and trained copies on a frozen base,
  // which computes no weight gradients (train/lora_setup.h counts its FLOPs).
  const model::ModelConfig& mc = run.model().config();
  if (run.setup.lora) mfu_.lora = lora_trained(run.model().registry());
  mfu_.flops_per_token = run.setup.lora ? mfu_.lora.flops_per_token(mc, run.seq_len) : mc.flops_per_token(run.seq_len);
  mfu_.peak = run_peak(c);
}

void StepReporter::start() {
  const config::TrainConfig& c = run_.config;
  // report_to tensorboard: rank 0 writes the step lines' numbers as TensorBoard scalars.
  std::unique_ptr<StepSink> tensorboard, csv;
  if (main_rank_ && !c.tensorboard_dir.empty()) tensorboard = tensorboard_sink(c.tensorboard_dir, c.tensorboard_tags);
  // ds_config csv_monitor: DeepSpeed's per-tag CSV files, on rank 0 as DeepSpeed does.
  if (main_rank_ && !c.csv_monitor_dir.empty()) csv = csv_sink(c.csv_monitor_dir);
  // Opened in that order (their log lines), written CSV first.
  if (csv) sinks_.push_back(std::move(csv));
  if (tensorboard) sinks_.push_back(std::move(tensorboard));
  t_last_ = std::chrono::steady_clock::now();
  t_start_ = t_last_;
  first_step_ = run_.step;
  const auto* offload = dynamic_cast<const zero::OffloadedOptimizer*>(run_.optimizer.get());
  state_swap_ = offload ? offload->nvme_store() : nullptr;
  param_swap_ = run_.engine->param_store();
  if (param_swap_ && param_swap_->layout().swap_file.empty()) param_swap_ = nullptr;
  nvme_last_ = nvme_traffic();
}

zero::SwapTraffic StepReporter::nvme_traffic() const {
  zero::SwapTraffic t;
  if (state_swap_) t += state_swap_->traffic();
  if (param_swap_) t += param_swap_->traffic();
  return t;
}

void StepReporter::micro_batch_done() { tokens_since_log_ += run_.micro_batch * run_.seq_len * run_.world_size(); }

StepRecord StepReporter::measure(double secs) {
  StepRecord r;
  r.step = run_.step;
  r.total_steps = run_.total_steps;
  r.seconds = secs;
  r.steps = steps_since_log_;
  r.tokens_per_s = static_cast<double>(tokens_since_log_) / secs;
  tokens_since_log_ = 0;
  r.mfu = r.tokens_per_s * mfu_.flops_per_token / mfu_.peak.flops;
  r.rss_bytes = host_memory().rss_bytes;
  r.elapsed_s = std::chrono::duration<double>(t_last_ - t_start_).count();
  r.eta_s = r.elapsed_s / static_cast<double>(r.step - first_step_) * static_cast<double>(r.total_steps - r.step);
  // Bytes this rank moved through collectives per step (ring-algorithm accounting).
  const zero::CommVolume volume = run_.engine->comm_volume();
  r.comm_bytes_per_step = volume.total() / static_cast<double>(steps_since_log_);
  r.comm_shown = run_.world_size() > 1;
  run_.engine->reset_comm_volume();
  r.gpu = cuda::initialized();
  if (r.gpu) r.gpu_peak_bytes = cuda::peak_bytes();
  // NVMe swap traffic since the last line (the host step may still be swapping).
  if (state_swap_ || param_swap_) {
    const zero::SwapTraffic t = nvme_traffic();
    r.nvme = SwapRates{static_cast<double>(t.read_bytes - nvme_last_.read_bytes),
                       static_cast<double>(t.written_bytes - nvme_last_.written_bytes),
                       t.read_wait_s + t.write_wait_s - nvme_last_.read_wait_s - nvme_last_.write_wait_s};
    nvme_last_ = t;
  }
  if (run_.timer) {
    const PhaseTimer::Totals t = run_.timer->take();
    const double n = static_cast<double>(std::max<int64_t>(1, steps_since_log_));
    r.times = StepTimes{t.forward_ms / n, t.backward_ms / n, t.optimizer_ms / n, 1e3 * volume.wait_seconds / n};
  }
  if (run_.config.memory_breakdown) r.memory = memory_breakdown(run_);
  r.targets_shown = run_.loader->samples() > 0;
  r.samples = r.step * run_.micro_batch * run_.grad_accum * run_.world_size();
  r.loss_scaler = run_.scaler.config().enabled;
  return r;
}

void StepReporter::step_done(double loss, float lr, double grad_norm, float loss_scale, bool skipped,
                             int64_t target_tokens, bool last) {
  ++steps_since_log_;
  const int64_t step = run_.step;
  if (!main_rank_ || !(step % run_.config.steps_per_print == 0 || last || skipped)) return;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - t_last_).count();
  t_last_ = now;
  StepRecord r = measure(secs);
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = grad_norm;
  r.loss_scale = loss_scale;
  r.skipped = skipped;
  r.skipped_steps = run_.scaler.skipped_steps();
  r.target_tokens = target_tokens;
  for (const auto& sink : sinks_) sink->step(r);
  steps_since_log_ = 0;
}

void StepReporter::evaluation(double val_loss, bool skipped) {
  if (!main_rank_) return;
  const EvalRecord r{run_.step, run_.total_steps, val_loss, skipped};
  for (const auto& sink : sinks_) sink->evaluation(r);
}

}  // namespace zt::train
