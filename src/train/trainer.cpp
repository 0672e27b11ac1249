#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/cuda_api.h"
#include "core/env_vars.h"
#include "core/fail_point.h"
#include "core/log.h"
#include "core/parallel.h"
#include "model/hf_dir.h"
#include "model/inference_load.h"
#include "config/config_dump.h"
#include "train/gemm_peak.h"
#include "train/lora_setup.h"
#include "train/generate.h"
#include "train/memory_report.h"
#include "train/metrics.h"
#include "config/run_config.h"
#include "train/signals.h"
#include "train/step_protocol.h"
#include "train/csv_monitor.h"
#include "train/tensorboard.h"
#include "train/training_run.h"
#include "zero/offload_optimizer.h"

namespace zt::train {
using nlohmann::json;

namespace {

// The model the end-of-run samples come from (null: the trained model itself, which is
// on the host or already f32 on the GPU). The KV-cache engine runs f32 weights on the GPU,
// so a 16-bit GPU model is converted in device memory (no reload from the saved files)
// when the device has room for the f32 copy; otherwise the saved model is sampled on the
// host, as the line says.
std::unique_ptr<model::Transformer> sampling_copy(const model::Transformer& model, const std::string& final_dir) {
  const Device device = model.options().device;
  if (device.is_cpu() || model.options().param_dtype == DType::F32) return nullptr;
  size_t f32_bytes = 0;
  for (const auto& unit : model.registry().units()) f32_bytes += static_cast<size_t>(unit->padded_numel()) * sizeof(float);
  const cuda::MemoryStats stats = cuda::memory_stats();
  const size_t available = cuda::free_device_memory() + (stats.bytes_reserved - stats.bytes_in_use);
  const size_t margin = size_t{512} << 20;  // KV cache, prefill activations, logits, workspaces
  if (f32_bytes + margin <= available) return model::inference_copy(model, DType::F32, device);
  ZT_INFO("samples: the f32 copy the GPU decoder needs (", human_bytes(static_cast<double>(f32_bytes)), ") does not fit the ",
          human_bytes(static_cast<double>(available)), " free on the device; sampling the saved model on the host");
  return model::load_pretrained(final_dir).model;
}

// A LoRA run's samples come from the base with final/'s adapter merged (the KV-cache
// engine runs plain weights), as `zerotrain generate --model BASE --adapter final/` would
// give them; null when the base has no files (a preset) to merge into.
std::unique_ptr<model::Transformer> lora_sampling_copy(const config::TrainConfig& c, const std::string& final_dir,
                                                       Device device) {
  if (c.model.path.empty()) {
    ZT_INFO("samples: skipped (a LoRA run on a model with no weight files to merge the adapters into)");
    return nullptr;
  }
  return model::load_for_inference(c.model.path, DType::F32, device, final_dir).model;
}

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

// wall_clock_breakdown's numbers: per-step means since the last log line.
struct StepTimes {
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, comm_ms = 0;
  json to_json() const {
    return {{"fwd", forward_ms}, {"bwd", backward_ms}, {"step", optimizer_ms}, {"comm", comm_ms}};
  }
};

StepTimes take_step_times(TrainingRun& run, double comm_seconds, int64_t steps) {
  const PhaseTimer::Totals t = run.timer->take();
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  return {t.forward_ms / n, t.backward_ms / n, t.optimizer_ms / n, 1e3 * comm_seconds / n};
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

}  // namespace

TrainResult run_training(const config::TrainConfig& config) {
  TrainResult result;
  const std::unique_ptr<TrainingRun> run_ptr = start_training_run(config);
  TrainingRun& run = *run_ptr;
  const config::TrainConfig& c = run.config;
  model::Transformer& model = run.model();
  const model::ModelConfig& mc = model.config();
  const int64_t B = run.micro_batch, T = run.seq_len, gas = run.grad_accum, total_steps = run.total_steps;
  remove_stale_outputs(run);
  // The checkpoint this run resumed from already holds its starting state.
  const std::string resumed_from = c.resume.empty() ? "" : load_run_checkpoint(run, c.resume);

  // One writer: rank 0 (another rank opening it would truncate it under rank 0).
  std::unique_ptr<MetricsFile> metrics_file =
      run.is_main_rank() ? std::make_unique<MetricsFile>((run.output_dir / "metrics.jsonl").string(), !c.resume.empty())
                         : std::make_unique<MetricsFile>();
  MetricsFile& metrics = *metrics_file;
  // What trains: every weight, or a LoRA run's adapters and trained copies on a frozen base,
  // which computes no weight gradients (train/lora_setup.h counts its FLOPs).
  const LoraTrained lora = run.setup.lora ? lora_trained(model.registry()) : LoraTrained{};
  const double flops_per_token = run.setup.lora ? lora.flops_per_token(mc, T) : mc.flops_per_token(T);
  const PeakFlops peak = run_peak(c);
  ZT_INFO("model: ", mc.model_type, ", ", mc.num_parameters(), " parameters (", mc.num_layers, " layers, width ",
          mc.hidden_size, "), ", config::precision_name(c.precision),
          c.optimizer.master_weights == zero::MasterWeights::None ? " (no master weights: bf16 optimizer state)" : "",
          ", activation checkpointing ", c.model.activation_checkpointing ? "on" : "off");
  ZT_INFO("data: ", run.windows, " windows of ", T, " tokens; batch ", c.train_batch_size, " = micro ", B,
          " x accumulation ", gas, " x world ", c.world_size, "; ", total_steps, " steps; lr ",
          run.schedule->describe());
  if (run.setup.lora) {
    ZT_INFO("LoRA: r ", run.setup.lora->r, ", scaling ", run.setup.lora->scaling(), " on ",
            model.options().lora.target_modules.size(), " module(s) per layer; ", lora.adapters, " adapter parameters",
            lora.copies > 0 ? str(" and ", lora.copies, " in trained copies (bias, modules_to_save)") : "",
            " train, the base is frozen (", c.lora_source, "); MFU counts ", flops_per_token / 1e6,
            " MFLOP per token (4 per base weight: no weight gradients, + attention, + 6 per adapter parameter",
            lora.head_copy > 0 ? ", + 2 per element of the head's copy: its weight gradient" : "", ")");
  }
  log_memory_plan(run);
  ZT_INFO(cpu_description(), ", ", num_threads(), " threads per rank");
  ZT_INFO("MFU against ", peak.describe());

  const bool main_rank = run.is_main_rank();
  if (c.wall_clock_breakdown && main_rank) enable_phase_timing(run);  // rank 0 prints it
  if (c.memory_breakdown && main_rank) {
    std::printf("%s\n", memory_breakdown(run).line().c_str());
    std::fflush(stdout);
  }

  StopSignals signals(StopOptions{c.stop_grace_seconds});
  // Failure drills of the tests (core/fail_point.h); nothing unless the environment asks.
  const FaultInjector drills(run.rank());
  // The newest state on disk: the checkpoint resumed from, then each one saved.
  int64_t saved_step = -1;  // -1: none yet
  std::string saved_dir;
  if (!resumed_from.empty()) {
    saved_step = run.step;
    saved_dir = resumed_from;
    signals.saved(resumed_from, run.step);
  }
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  // Packed SFT samples: each token's sample start (attention and positions stay per sample).
  const OwnedTensor seg = run.loader->packs_samples() ? OwnedTensor({B, T}, DType::I32) : OwnedTensor();
  int64_t& step = run.step;
  // ZeRO-3 writes a full model only with stage3_gather_16bit_weights_on_model_save, as
  // DeepSpeed does; the checkpoint then is the result (zerotrain consolidate), so it is
  // written at the end even with save_strategy: no.
  // A LoRA run's final/ is its adapters, gathered alone (small): written at every stage, as
  // HF's Trainer saves a PEFT model's adapter under ZeRO-3.
  const bool write_final = run.engine->stage() < 3 || run.world_size() == 1 ||
                           c.zero.stage3_gather_16bit_weights_on_model_save || run.setup.lora.has_value();
  // load_best_model_at_end and early stopping (HF's Trainer and EarlyStoppingCallback):
  // the best validation loss so far, the step it was measured at, and the evaluations
  // since the last improvement (larger than the threshold).
  bool have_best = false, early_stop = false;
  double best_metric = 0;
  int64_t best_step = -1, evals_without_improvement = 0;
  auto save = [&]() {
    // The step just evaluated as the best: its checkpoint is the one rotation keeps.
    if (c.load_best_model_at_end && best_step == step) run.best_checkpoint = "global_step" + std::to_string(step);
    signals.saving(step);
    drills.at(TrainPoint::Save, step);
    result.last_checkpoint = save_run_checkpoint(run, run.checkpoint_root().string());
    saved_step = step;
    saved_dir = result.last_checkpoint;
    signals.saved(saved_dir, step);
  };
  // A stop: save the state of the last complete step (unless it is on disk already) and
  // say where it is.
  auto stop_and_save = [&](const std::string& during) {
    if (saved_step != step) save();
    // A rank the signal did not reach stops because another one asked (any_rank).
    const std::string what = signals.signal() != 0
                                 ? "received signal " + std::to_string(signals.signal())
                                 : "stopping with the other ranks (a stop signal reached one of them)";
    std::printf("%s%s: saved %s at step %lld; resume with --resume latest\n", what.c_str(), during.c_str(),
                saved_dir.c_str(), static_cast<long long>(step));
    std::fflush(stdout);
    result.last_checkpoint = saved_dir;
    result.stopped_by_signal = true;
  };

  // report_to tensorboard: rank 0 writes the step lines' numbers as TensorBoard scalars.
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (main_rank && !c.tensorboard_dir.empty()) {
    tensorboard = std::make_unique<TensorBoardWriter>(c.tensorboard_dir);
    ZT_INFO("report_to tensorboard: ", tensorboard->path());
  }
  // ds_config csv_monitor: DeepSpeed's per-tag CSV files, on rank 0 as DeepSpeed does.
  std::unique_ptr<CsvMonitor> csv_monitor;
  if (main_rank && !c.csv_monitor_dir.empty()) {
    csv_monitor = std::make_unique<CsvMonitor>(c.csv_monitor_dir);
    ZT_INFO("csv_monitor: ", csv_monitor->dir());
  }
  auto t_last = std::chrono::steady_clock::now();
  // Elapsed time and ETA count from here: a resumed run's rate is its own steps'.
  const auto t_start = t_last;
  const int64_t first_step = step;
  int64_t tokens_since_log = 0, steps_since_log = 0;
  // The NVMe swaps, when there are any (the optimizer state's, the parameters'): their
  // traffic goes in the step line.
  const auto* offload = dynamic_cast<const zero::OffloadedOptimizer*>(run.optimizer.get());
  const zero::NvmeStore* state_swap = offload ? offload->nvme_store() : nullptr;
  const zero::ParamStore* param_swap = run.engine->param_store();
  if (param_swap && param_swap->layout().swap_file.empty()) param_swap = nullptr;
  const bool nvme = state_swap || param_swap;
  const auto nvme_traffic = [&] {
    zero::SwapTraffic t;
    if (state_swap) t += state_swap->traffic();
    if (param_swap) t += param_swap->traffic();
    return t;
  };
  zero::SwapTraffic nvme_last = nvme_traffic();
  // SFT data: the tokens each step trains on (labels not masked) go in the step line, and a
  // step without any is said (its loss and gradient are 0: it trains nothing).
  const bool masked_labels = run.loader->samples() > 0;
  int64_t steps_without_targets = 0;
  constexpr int64_t kStepsWithoutTargetsSaid = 3;
  // Every iteration is one global step, applied or skipped on fp16 overflow (DeepSpeed's
  // global_steps), so max_steps counts skipped steps and step numbers never repeat.
  while (step < total_steps) {
    OptimizerStep opt_step(run);
    double loss_sum = 0;
    const float scale = opt_step.loss_scale();
    // Where the step starts: a stop between its micro-batches returns here.
    const io::LoaderState data_at_start = run.loader->state();
    const int64_t micro_at_start = run.micro_steps;
    int64_t stopped_at_micro = 0;  // 0: the step ran all its micro-batches
    int64_t targets = 0;           // this rank's targets counted in the loss (host labels)
    for (int64_t m = 0; m < gas; ++m) {
      if (m > 0) {
        // A long accumulation must not outlast a stop signal: the ranks agree between
        // micro-batches (one scalar collective each; none with one process) and stop
        // there, without the update. The accumulated gradients are not part of a
        // checkpoint, so the partial step is dropped: the data position and micro-step
        // count go back to the step's start and the previous step's state is saved.
        drills.at(TrainPoint::BeforeMicroBatch, step + 1, m);
        if (comm::any_rank(run.world_comm(), signals.requested())) {
          stopped_at_micro = m;
          break;
        }
      }
      run.loader->next(tok, tgt, seg);
      {
        OptimizerStep::MicroBatch micro = opt_step.micro_batch();
        loss_sum += micro.forward_backward(tok, tgt, seg);
        targets += micro.targets();
      }  // the micro-batch ends here (stages 0-1 reduce after the step's last one)
      tokens_since_log += B * T * run.world_size();
    }
    if (stopped_at_micro > 0) {
      run.loader->restore(data_at_start);
      run.micro_steps = micro_at_start;
      stop_and_save(" during step " + std::to_string(step + 1) + " (before micro-batch " +
                    std::to_string(stopped_at_micro) + " of " + std::to_string(gas) +
                    "; that step's partial gradients were dropped)");
      break;
    }
    const double loss = mean_over_ranks(run, loss_sum / static_cast<double>(gas));
    // Every target counts in plain text: only masked labels need the ranks' sum (a host
    // scalar, no device wait).
    const int64_t step_targets =
        masked_labels ? std::llround(comm::sum_over_ranks(run.world_comm(), static_cast<double>(targets)))
                      : targets * run.world_size();
    if (masked_labels && step_targets == 0 && main_rank && steps_without_targets++ < kStepsWithoutTargetsSaid)
      ZT_WARN("step ", step + 1, ": no token of its batch is a target (every label is masked: ",
              c.data.packing
                  ? std::string("its windows hold prompt tokens only")
                  : str("the responses of its samples (", step_samples(run), run.world_size() > 1 ? " on rank 0" : "",
                        ") lie past data.seq_len ", T, "; the data warning at start-up names the records"),
              "), so it trains nothing",
              steps_without_targets == kStepsWithoutTargetsSaid ? " (further such steps are not said)" : "");

    // A skipped step leaves the schedule where it is, and counts as a global step.
    const StepOutcome outcome = opt_step.finish(c.gradient_clipping);
    const bool skip = !outcome.applied;
    const double grad_norm = outcome.grad_norm;
    const float lr = outcome.lr;
    result.losses.push_back(loss);
    const int64_t skipped_so_far = run.scaler.skipped_steps();

    const bool last = step >= total_steps;
    ++steps_since_log;
    if (main_rank && (step % c.steps_per_print == 0 || last || skip)) {
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t_last).count();
      t_last = now;
      const double tps = static_cast<double>(tokens_since_log) / secs;
      tokens_since_log = 0;
      const double mfu = tps * flops_per_token / peak.flops;
      const MemoryUsage mem = host_memory();
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double eta =
          elapsed / static_cast<double>(step - first_step) * static_cast<double>(total_steps - step);
      const std::string timing = " | " + human_duration(elapsed) + " elapsed, ETA " + human_duration(eta);
      // Bytes this rank moved through collectives per step (ring-algorithm accounting).
      const zero::CommVolume volume = run.engine->comm_volume();
      const double comm_per_step = volume.total() / static_cast<double>(steps_since_log);
      run.engine->reset_comm_volume();
      const std::string comm = run.world_size() > 1 ? " | comm " + human_bytes(comm_per_step) + "/step" : "";
      const std::string gpu =
          cuda::initialized() ? " | gpu peak " + human_bytes(static_cast<double>(cuda::peak_bytes())) : "";
      // NVMe swap traffic since the last line (the host step may still be swapping).
      std::string swap;
      json swap_record;
      if (nvme) {
        const zero::SwapTraffic t = nvme_traffic();
        const double n = static_cast<double>(steps_since_log);
        const double read = static_cast<double>(t.read_bytes - nvme_last.read_bytes);
        const double written = static_cast<double>(t.written_bytes - nvme_last.written_bytes);
        const double waited = t.read_wait_s + t.write_wait_s - nvme_last.read_wait_s - nvme_last.write_wait_s;
        char buf[160];
        std::snprintf(buf, sizeof buf, " | nvme r %.2f w %.2f GB/s, waited %.2f s/step", read / secs / 1e9,
                      written / secs / 1e9, waited / n);
        swap = buf;
        swap_record = {{"read_bytes_per_step", read / n},
                       {"written_bytes_per_step", written / n},
                       {"wait_s_per_step", waited / n}};
        nvme_last = t;
      }
      std::printf(
          "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %7.4f | scale %g | %8.0f tok/s | MFU %5.1f%% | "
          "mem %s%s%s%s%s",
          static_cast<long long>(step), static_cast<long long>(total_steps), loss, lr, grad_norm, scale, tps,
          100.0 * mfu, human_bytes(static_cast<double>(mem.rss_bytes)).c_str(), gpu.c_str(), timing.c_str(),
          comm.c_str(), swap.c_str());
      if (masked_labels) std::printf(" | targets %lld", static_cast<long long>(step_targets));
      if (skip) std::printf(" | overflow: skipped (%lld so far)", static_cast<long long>(skipped_so_far));
      std::printf("\n");
      json record = {{"step", step},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", std::isnan(grad_norm) ? json(nullptr) : json(grad_norm)},
                     {"loss_scale", scale},
                     {"tokens_per_s", tps},
                     {"mfu", mfu},
                     {"rss_bytes", mem.rss_bytes},
                     {"comm_bytes_per_step", comm_per_step},
                     {"skipped", skip},
                     {"skipped_steps", skipped_so_far},
                     {"target_tokens", step_targets},
                     {"elapsed_s", elapsed},
                     {"eta_s", eta},
                     {"gpu_peak_bytes", cuda::initialized() ? json(cuda::peak_bytes()) : json(nullptr)}};
      if (nvme) record["nvme"] = swap_record;
      if (run.timer) {
        // DeepSpeed's wall_clock_breakdown line; comm is the host time blocked in the
        // engine's collectives, inside the phases it happened in.
        const StepTimes t = take_step_times(run, volume.wait_seconds, steps_since_log);
        std::printf("time (ms/step, mean of %lld) | fwd: %.2f | bwd: %.2f | step: %.2f | comm: %.2f\n",
                    static_cast<long long>(steps_since_log), t.forward_ms, t.backward_ms, t.optimizer_ms, t.comm_ms);
        record["time_ms"] = t.to_json();
      }
      if (c.memory_breakdown) {
        const MemoryBreakdown mb = memory_breakdown(run);
        std::printf("%s\n", mb.line().c_str());
        record["memory"] = mb.to_json();
      }
      std::fflush(stdout);
      steps_since_log = 0;
      metrics.write(record);
      // DeepSpeed's engine: its monitors' tags, against the samples seen so far.
      const int64_t samples = step * run.micro_batch * gas * run.world_size();
      const auto deepspeed_events = [&](auto& sink) {
        sink.scalar("Train/Samples/train_loss", loss, samples);
        sink.scalar("Train/Samples/lr", lr, samples);
        if (run.scaler.config().enabled) sink.scalar("Train/Samples/loss_scale", scale, samples);
        sink.flush();
      };
      if (csv_monitor) deepspeed_events(*csv_monitor);
      if (tensorboard && c.tensorboard_tags == config::TrainConfig::TensorBoardTags::DeepSpeed) {
        deepspeed_events(*tensorboard);
      } else if (tensorboard) {
        for (const auto& [tag, value] : std::initializer_list<std::pair<const char*, double>>{
                 {"train/loss", loss},
                 {"train/learning_rate", lr},
                 {"train/grad_norm", grad_norm},
                 {"train/loss_scale", scale},
                 {"train/tokens_per_second", tps},
                 {"train/mfu", mfu},
                 {"train/memory_bytes", static_cast<double>(mem.rss_bytes)}})
          if (std::isfinite(value)) tensorboard->scalar(tag, value, step);
        tensorboard->flush();
      }
    }
    // Evaluation and checkpoints follow the global step, skipped or not: a skipped step
    // leaves a consistent state (weights as before; scaler and counters advanced).
    // eval_strategy / save_strategy epoch: at every epoch's last step (HF's on_epoch_end).
    const int64_t eval_every = c.evaluations == config::Evaluations::Epoch ? run.steps_per_epoch : c.eval_interval;
    const int64_t save_every =
        c.checkpoint_saves == config::CheckpointSaves::Epoch ? run.steps_per_epoch : c.save_interval;
    if (c.evaluations != config::Evaluations::None && ((eval_every > 0 && step % eval_every == 0) || last)) {
      const double vl = validation_loss(run, c.eval_batches);
      if (!std::isnan(vl)) {
        // The same decision on every rank.
        const double metric = mean_over_ranks(run, vl);
        const bool better = !have_best || (c.greater_is_better ? metric > best_metric : metric < best_metric);
        if (!have_best || (better && std::fabs(metric - best_metric) > c.early_stopping_threshold))
          evals_without_improvement = 0;
        else
          ++evals_without_improvement;
        if (better) have_best = true, best_metric = metric, best_step = step;
        early_stop = c.early_stopping_patience > 0 && evals_without_improvement >= c.early_stopping_patience;
      }
      if (!std::isnan(vl) && main_rank) {
        result.final_val_loss = vl;
        std::printf("step %6lld/%lld | val loss %.4f | val ppl %.2f\n", static_cast<long long>(step),
                    static_cast<long long>(total_steps), vl, std::exp(vl));
        std::fflush(stdout);
        metrics.write({{"step", step}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}, {"skipped", skip}});
        if (tensorboard && c.tensorboard_tags == config::TrainConfig::TensorBoardTags::Hf) {
          tensorboard->scalar("eval/loss", vl, step);
          tensorboard->flush();
        }
      }
    }
    drills.at(TrainPoint::StepDone, step);
    // Every rank stops at the same step (a signal may reach only some of them).
    const bool stop = comm::any_rank(run.world_comm(), signals.requested());
    const bool scheduled = (c.checkpoint_saves != config::CheckpointSaves::None &&
                            ((save_every > 0 && step % save_every == 0) || last)) ||
                           (last && !write_final);
    if (scheduled) save();
    if (stop) {
      stop_and_save("");
      break;
    }
    if (early_stop && !last) {
      if (main_rank)
        ZT_INFO("early stopping at step ", step, ": ", evals_without_improvement,
                " evaluations without a validation loss better than ", best_metric, " (step ", best_step,
                ") by more than ", c.early_stopping_threshold, " (early_stopping_patience ", c.early_stopping_patience,
                ")");
      if (saved_step != step && c.checkpoint_saves != config::CheckpointSaves::None) save();
      result.early_stopped = true;
      break;
    }
  }
  result.best_step = best_step;
  result.steps = step;
  result.skipped_steps = run.scaler.skipped_steps();
  result.optimizer_steps = run.optimizer->steps_taken();
  // load_best_model_at_end: the weights of the best checkpoint go to final/ (the counters
  // above are the run's own).
  if (c.load_best_model_at_end && !run.best_checkpoint.empty() && best_step != step && !result.stopped_by_signal) {
    const std::string best_dir = (run.checkpoint_root() / run.best_checkpoint).string();
    load_run_checkpoint(run, best_dir);
    if (main_rank)
      ZT_INFO("load_best_model_at_end: the final model is ", best_dir, " (validation loss ", best_metric, " at step ",
              best_step, ")");
  }

  if (!result.stopped_by_signal && !write_final) {
    ZT_INFO(
        "ZeRO-3: no final model directory (stage3_gather_16bit_weights_on_model_save is false); write one with "
        "`zerotrain consolidate ",
        result.last_checkpoint, " ", (run.output_dir / "final").string(), "`");
  } else if (!result.stopped_by_signal) {
    const auto save_start = std::chrono::steady_clock::now();
    if (run.setup.lora)
      run.engine->gather_trainable_units();
    else
      run.engine->gather_full_model();
    result.final_model_dir = (run.output_dir / "final").string();
    if (main_rank) {
      save_final_model(model, run.setup, result.final_model_dir, storage_dtype(c.precision));
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
      char took[32];
      std::snprintf(took, sizeof took, "%.1f s", secs);
      ZT_INFO("wrote the final ", run.setup.lora ? "LoRA adapter" : "model", " to ", result.final_model_dir,
              run.setup.lora ? " (PEFT format)" : " (HF format)", " in ", took);
    }
    run.world_comm().barrier();  // the directory is complete for every rank
    const bool lora = run.setup.lora.has_value();
    std::unique_ptr<model::Transformer> lora_copy;
    if (lora && main_rank && c.sample_tokens > 0 && !c.sample_prompts.empty())
      lora_copy = lora_sampling_copy(c, result.final_model_dir, model.options().device);
    if (main_rank && c.sample_tokens > 0 && !c.sample_prompts.empty() && (!lora || lora_copy)) {
      const std::unique_ptr<model::Transformer> copy =
          lora ? std::move(lora_copy) : sampling_copy(model, result.final_model_dir);
      model::Transformer& sampler = copy ? *copy : model;
      for (const std::string& prompt : c.sample_prompts) {
        // A stop signal ends the samples between two tokens: final/ is complete, so the run
        // exits 0 at once instead of generating on (thousands of tokens can take minutes).
        if (signals.requested()) break;
        SampleOptions so;
        so.max_new_tokens = c.sample_tokens;
        so.temperature = c.sample_temperature;
        so.top_k = c.sample_top_k;
        so.seed = c.seed;
        so.stop_token = run.setup.tokenizer->eos_id();
        so.stop_check = [&](int64_t token) {
          drills.at(TrainPoint::SampleToken, token);
          return signals.requested() ? Generation::Stop : Generation::Continue;
        };
        const std::vector<int32_t> ids = sample(sampler, run.setup.tokenizer->encode(prompt), so);
        const std::string text = run.setup.tokenizer->decode(ids, true);
        std::printf("---- sample (temperature %.2f, top-k %d) ----\n%s\n----\n", c.sample_temperature, c.sample_top_k,
                    text.c_str());
        result.samples.push_back(text);
      }
      if (signals.requested()) {
        std::printf(
            "received signal %d during the end-of-run samples: they stop here (%zu of %zu begun; %s is complete)\n",
            signals.signal(), result.samples.size(), c.sample_prompts.size(), result.final_model_dir.c_str());
        std::fflush(stdout);
      }
    }
    run.engine->release_full_model();
  }
  return result;
}

}  // namespace zt::train
