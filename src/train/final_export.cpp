#include "train/final_export.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "backend/cuda_api.h"
#include "core/fail_point.h"
#include "core/log.h"
#include "model/hf_dir.h"
#include "model/inference_load.h"
#include "train/generate.h"
#include "train/metrics.h"
#include "train/signals.h"
#include "train/training_run.h"

namespace zt::train {

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
  for (const auto& unit : model.registry().units())
    f32_bytes += static_cast<size_t>(unit->padded_numel()) * sizeof(float);
  const cuda::MemoryStats stats = cuda::memory_stats();
  const size_t available = cuda::free_device_memory() + (stats.bytes_reserved - stats.bytes_in_use);
  const size_t margin = size_t{512} << 20;  // KV cache, prefill activations, logits, workspaces
  if (f32_bytes + margin <= available) return model::inference_copy(model, DType::F32, device);
  ZT_INFO("samples: the f32 copy the GPU decoder needs (", human_bytes(static_cast<double>(f32_bytes)),
          ") does not fit the ", human_bytes(static_cast<double>(available)),
          " free on the device; sampling the saved model on the host");
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

// Rank 0: the samples of the run config's prompts from final/'s model.
std::vector<std::string> sample_prompts(TrainingRun& run, const std::string& final_dir, const StopSignals& signals,
                                        const FaultInjector& drills) {
  const config::TrainConfig& c = run.config;
  model::Transformer& model = run.model();
  const bool lora = run.setup.lora.has_value();
  std::unique_ptr<model::Transformer> lora_copy;
  if (lora) lora_copy = lora_sampling_copy(c, final_dir, model.options().device);
  std::vector<std::string> samples;
  if (lora && !lora_copy) return samples;
  const std::unique_ptr<model::Transformer> copy = lora ? std::move(lora_copy) : sampling_copy(model, final_dir);
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
    samples.push_back(text);
  }
  if (signals.requested()) {
    std::printf("received signal %d during the end-of-run samples: they stop here (%zu of %zu begun; %s is complete)\n",
                signals.signal(), samples.size(), c.sample_prompts.size(), final_dir.c_str());
    std::fflush(stdout);
  }
  return samples;
}

}  // namespace

FinalExport export_final(TrainingRun& run, FinalModel final, const std::string& last_checkpoint,
                         const StopSignals& signals, const FaultInjector& drills) {
  FinalExport out;
  const config::TrainConfig& c = run.config;
  if (final == FinalModel::CheckpointOnly) {
    ZT_INFO(
        "ZeRO-3: no final model directory (stage3_gather_16bit_weights_on_model_save is false); write one with "
        "`zerotrain consolidate ",
        last_checkpoint, " ", (run.output_dir / "final").string(), "`");
    return out;
  }
  const bool main_rank = run.is_main_rank();
  const auto save_start = std::chrono::steady_clock::now();
  if (run.setup.lora)
    run.engine->gather_trainable_units();
  else
    run.engine->gather_full_model();
  out.model_dir = (run.output_dir / "final").string();
  if (main_rank) {
    save_final_model(run.model(), run.setup, out.model_dir, storage_dtype(c.precision));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", secs);
    ZT_INFO("wrote the final ", run.setup.lora ? "LoRA adapter" : "model", " to ", out.model_dir,
            run.setup.lora ? " (PEFT format)" : " (HF format)", " in ", took);
  }
  run.world_comm().barrier();  // the directory is complete for every rank
  if (main_rank && c.sample_tokens > 0 && !c.sample_prompts.empty())
    out.samples = sample_prompts(run, out.model_dir, signals, drills);
  run.engine->release_full_model();
  return out;
}

}  // namespace zt::train
