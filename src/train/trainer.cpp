#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/data_setup.h"
#include "train/generate.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/model_setup.h"
#include "train/run_config.h"
#include "train/signals.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer.h"

namespace zt::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::BF16: return DType::BF16;
    case Precision::F16: return DType::F16;
    case Precision::F32: return DType::F32;
  }
  return DType::F32;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::BF16: return "bf16";
    case Precision::F16: return "fp16";
    case Precision::F32: return "fp32";
  }
  return "?";
}

std::unique_ptr<LrSchedule> make_schedule(const TrainConfig& c, int64_t total_steps) {
  if (c.scheduler.is_object() && !c.scheduler.empty())
    return make_deepspeed_schedule(c.scheduler, c.optimizer.lr, c.source, ScheduleRun{total_steps, c.warmup_steps});
  return make_hf_schedule(c.hf_scheduler.empty() ? "constant" : c.hf_scheduler, c.optimizer.lr, c.warmup_steps,
                          total_steps);
}

// Mean loss over `batches` validation micro-batches, always from the start of the
// validation order so evaluations are comparable.
double evaluate(model::Transformer& model, const std::vector<std::string>& shards, int64_t B, int64_t T, uint64_t seed,
                int64_t batches) {
  if (shards.empty() || batches <= 0) return std::nan("");
  io::BatchLoader loader(shards, B, T, seed ^ 0xE7A1ull);
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  model.set_mode(model::Mode::Eval);
  double sum = 0;
  int64_t count = 0;
  const int64_t n = std::min<int64_t>(batches, std::max<int64_t>(1, loader.windows_per_epoch() / B));
  for (int64_t i = 0; i < n; ++i) {
    loader.next(tok, tgt);
    const auto r = model.forward(tok, tgt);
    sum += r.loss_sum;
    count += r.count;
  }
  model.set_mode(model::Mode::Train);
  return count ? sum / static_cast<double>(count) : std::nan("");
}

}  // namespace

TrainResult run_training(const TrainConfig& config) {
  TrainConfig c = config;  // epoch-based runs learn their total step count from the data
  TrainResult result;
  for (const std::string& w : c.warnings) ZT_WARN(w);
  const fs::path out(c.output_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) ZT_THROW_INPUT("cannot create output_dir '", c.output_dir, "': ", ec.message());

  // Model and tokenizer.
  ModelSetup ms = setup_model(c, out);
  model::Transformer& model = *ms.model;
  const model::ModelConfig& mc = model.config();
  const int64_t T = c.data.seq_len > 0 ? c.data.seq_len : mc.max_position_embeddings;
  if (T > mc.max_position_embeddings)
    ZT_THROW_INPUT("data.seq_len ", T, " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);
  const int64_t B = c.micro_batch_per_gpu, gas = c.grad_accum_steps;

  // Data: token shards (prepared from text when needed).
  const DataSetup data = setup_data(c, *ms.tokenizer, out);
  io::BatchLoader loader(data.train_shards, B, T, c.seed);
  const int64_t windows = loader.windows_per_epoch();
  if (windows < B)
    ZT_THROW_INPUT("the training data has ", windows, " windows of ", T + 1, " tokens, fewer than one micro-batch (",
                   B, "): use more data or a smaller seq_len / micro batch");
  int64_t total_steps = c.max_steps;
  if (total_steps <= 0) {
    total_steps = std::max<int64_t>(1, static_cast<int64_t>(c.epochs * static_cast<double>(windows) /
                                                            static_cast<double>(B * gas * c.world_size)));
    set_total_steps(c, total_steps);
  }

  // Optimizer, schedule, loss scaler.
  std::unique_ptr<zero::Optimizer> optimizer = zero::make_optimizer(model.registry(), c.optimizer);
  const std::unique_ptr<LrSchedule> schedule = make_schedule(c, total_steps);
  zero::LossScalerConfig lsc = c.loss_scaler;
  lsc.enabled = c.precision == Precision::F16;
  zero::LossScaler scaler(lsc);

  // Resume.
  int64_t step = 0, micro_steps = 0;
  const fs::path ckpt_root = out / "checkpoints";
  if (!c.resume.empty()) {
    const std::string dir = resolve_checkpoint(c.resume == "latest" ? ckpt_root.string() : c.resume);
    const CheckpointState s = load_checkpoint(dir, model.registry(), optimizer->state_tensors());
    step = s.step;
    micro_steps = s.micro_steps;
    optimizer->set_steps_taken(s.extra.value("optimizer_steps", s.step));
    loader.restore({s.data_epoch, s.data_position});
    if (s.loss_scaler.is_object() && !s.loss_scaler.empty())
      scaler.restore({s.loss_scaler.at("scale").get<float>(), s.loss_scaler.at("hysteresis_left").get<int>(),
                      s.loss_scaler.at("clean_steps").get<int64_t>(), s.loss_scaler.at("skipped_steps").get<int64_t>()});
    ZT_INFO("resumed from ", dir, " at step ", step);
  }

  MetricsFile metrics((out / "metrics.jsonl").string(), !c.resume.empty());
  const double flops_per_token = mc.flops_per_token(T);
  const double peak = peak_flops(c.device == "cpu" ? "cpu" : c.device, c.precision != Precision::F32);
  ZT_INFO("model: ", mc.model_type, ", ", mc.num_parameters(), " parameters (", mc.num_layers, " layers, width ",
          mc.hidden_size, "), ", precision_name(c.precision), ", activation checkpointing ",
          c.model.activation_checkpointing ? "on" : "off");
  ZT_INFO("data: ", windows, " windows of ", T, " tokens; batch ", c.train_batch_size, " = micro ", B, " x accumulation ",
          gas, " x world ", c.world_size, "; ", total_steps, " steps; lr ", schedule->describe());
  ZT_INFO("memory: parameters ", human_bytes(static_cast<double>(model.registry().total_numel()) *
                                             static_cast<double>(dtype_size(storage_dtype(c.precision)))),
          ", optimizer state ", human_bytes(static_cast<double>(optimizer->state_bytes())), "; ", cpu_description(), ", ",
          num_threads(), " threads");

  StopSignals signals;
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  const model::Checkpointing ckpt_mode =
      c.model.activation_checkpointing ? model::Checkpointing::EveryBlock : model::Checkpointing::None;
  model.set_checkpointing(ckpt_mode);
  model.set_mode(model::Mode::Train);

  auto save = [&]() {
    CheckpointState s;
    s.step = step;
    s.micro_steps = micro_steps;
    const io::LoaderState ls = loader.state();
    s.data_epoch = ls.epoch;
    s.data_position = ls.position;
    s.seed = c.seed;
    if (lsc.enabled) {
      const auto st = scaler.state();
      s.loss_scaler = {{"scale", st.scale}, {"hysteresis_left", st.hysteresis_left}, {"clean_steps", st.clean_steps},
                       {"skipped_steps", st.skipped_steps}};
    }
    s.extra = {{"optimizer_steps", optimizer->steps_taken()}, {"total_steps", total_steps}};
    CheckpointWriteOptions wo;
    wo.keep_last = c.keep_last;
    wo.zero_stage = c.zero.stage;
    result.last_checkpoint = save_checkpoint(ckpt_root.string(), model.registry(), optimizer->state_tensors(), s, wo);
    ZT_INFO("saved checkpoint ", result.last_checkpoint);
  };

  auto t_last = std::chrono::steady_clock::now();
  int64_t tokens_since_log = 0;
  while (step < total_steps) {
    model.zero_grads();
    double loss_sum = 0;
    const float scale = scaler.scale();
    for (int64_t m = 0; m < gas; ++m) {
      loader.next(tok, tgt);
      model.set_dropout_seed(c.seed, static_cast<uint64_t>(micro_steps));
      const int64_t count = std::max<int64_t>(1, model::count_targets(tgt));
      // HF semantics: each micro-batch's mean token loss, divided by the accumulation steps.
      const auto r = model.forward_backward(tok, tgt, scale / static_cast<float>(count * gas));
      loss_sum += r.loss_sum / static_cast<double>(count);
      ++micro_steps;
      tokens_since_log += B * T;
    }
    const double loss = loss_sum / static_cast<double>(gas);

    const bool overflow = lsc.enabled && !zero::grads_finite(model.registry());
    const bool skip = scaler.update(overflow);
    double grad_norm = std::nan("");
    // Schedules are functions of the optimizer steps taken (skipped fp16 steps do not count).
    const float lr = schedule->lr(optimizer->steps_taken());
    if (!skip) {
      if (auto betas = schedule->betas(optimizer->steps_taken())) optimizer->set_betas(betas->first, betas->second);
      grad_norm = zero::global_grad_norm(model.registry()) / scale;
      float clip = 1.0f;
      if (c.gradient_clipping > 0 && grad_norm > c.gradient_clipping)
        clip = static_cast<float>(c.gradient_clipping / (grad_norm + 1e-6));
      optimizer->step(lr, clip / scale);
      ++step;
      result.losses.push_back(loss);
    } else {
      result.skipped_steps = scaler.skipped_steps();
    }

    const bool last = step >= total_steps;
    if (step % c.steps_per_print == 0 || last || skip) {
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t_last).count();
      t_last = now;
      const double tps = static_cast<double>(tokens_since_log) / secs;
      tokens_since_log = 0;
      const double mfu = tps * flops_per_token / peak;
      const MemoryUsage mem = host_memory();
      std::printf("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %7.4f | scale %g | %8.0f tok/s | MFU %5.1f%% | "
                  "mem %s%s\n",
                  static_cast<long long>(step), static_cast<long long>(total_steps), loss, lr, grad_norm, scale, tps,
                  100.0 * mfu, human_bytes(static_cast<double>(mem.rss_bytes)).c_str(),
                  skip ? " | overflow: step skipped" : "");
      std::fflush(stdout);
      metrics.write({{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", std::isnan(grad_norm) ? json(nullptr) : json(grad_norm)},
                     {"loss_scale", scale}, {"tokens_per_s", tps}, {"mfu", mfu}, {"rss_bytes", mem.rss_bytes},
                     {"skipped", skip}});
    }
    if (!skip && ((c.eval_interval > 0 && step % c.eval_interval == 0) || last)) {
      const double vl = evaluate(model, data.val_shards, B, T, c.seed, c.eval_batches);
      if (!std::isnan(vl)) {
        result.final_val_loss = vl;
        std::printf("step %6lld/%lld | val loss %.4f | val ppl %.2f\n", static_cast<long long>(step),
                    static_cast<long long>(total_steps), vl, std::exp(vl));
        std::fflush(stdout);
        metrics.write({{"step", step}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}});
      }
    }
    const bool stop = signals.requested();
    if (!skip && ((c.save_interval > 0 && step % c.save_interval == 0) || last || stop)) save();
    if (stop) {
      std::printf("received signal %d: saved %s at step %lld; resume with --resume latest\n", signals.signal(),
                  result.last_checkpoint.c_str(), static_cast<long long>(step));
      result.stopped_by_signal = true;
      break;
    }
  }
  result.steps = step;
  result.skipped_steps = scaler.skipped_steps();

  if (!result.stopped_by_signal) {
    result.final_model_dir = (out / "final").string();
    save_final_model(model, ms, result.final_model_dir, storage_dtype(c.precision));
    ZT_INFO("wrote the final model to ", result.final_model_dir, " (HF format)");
    for (const std::string& prompt : c.sample_prompts) {
      if (c.sample_tokens <= 0) break;
      SampleOptions so;
      so.max_new_tokens = c.sample_tokens;
      so.temperature = c.sample_temperature;
      so.top_k = c.sample_top_k;
      so.seed = c.seed;
      so.stop_token = ms.tokenizer->eos_id();
      const std::vector<int32_t> ids = sample(model, ms.tokenizer->encode(prompt), so);
      const std::string text = ms.tokenizer->decode(ids, true);
      std::printf("---- sample (temperature %.2f, top-k %d) ----\n%s\n----\n", c.sample_temperature, c.sample_top_k,
                  text.c_str());
      result.samples.push_back(text);
    }
  }
  return result;
}

}  // namespace zt::train

namespace zt::train {

TrainConfig builtin_default_config() {
  TrainConfig c = load_train_config({});
  c.source = "the built-in run";
  c.model.preset = "tiny-gpt2";
  c.data.train = {std::string(ZT_SOURCE_DIR) + "/data/text"};
  c.data.validation_fraction = 1.0 / 6.0;  // one license of six held out
  c.data.seq_len = 128;
  c.micro_batch_per_gpu = 16;
  c.grad_accum_steps = 1;
  c.train_batch_size = 16;
  c.optimizer.type = zero::OptimizerType::AdamW;
  c.optimizer.lr = 2e-3f;
  c.optimizer.beta1 = 0.9f;
  c.optimizer.beta2 = 0.95f;
  c.optimizer.weight_decay = 0.1f;
  c.hf_scheduler = "cosine";
  c.warmup_steps = 30;
  c.max_steps = 600;
  c.steps_per_print = 25;
  c.eval_interval = 150;
  c.eval_batches = 8;
  c.save_interval = 0;
  c.keep_last = 1;
  c.output_dir = "out/default";
  c.seed = 1337;
  c.sample_prompts = {"This License"};
  c.sample_tokens = 200;
  c.sample_temperature = 0.8f;
  c.sample_top_k = 40;
  return c;
}

}  // namespace zt::train
