// Fuzz target: the readers of config files users write (and download): a ds_config.json,
// an Accelerate YAML, a run config. The first byte picks the reader (as text: '0'..'5'),
// the rest is the file's text:
//   0 ds_config JSON -> parse_ds_config -> resolve_ds_config into a TrainConfig
//   1 Accelerate YAML -> parse_accelerate_config
//   2 run config YAML -> parse_run_config
//   3, 4, 5: the same three as files through load_train_config (run file, --deepspeed,
//            --config_file), which resolves everything into a TrainConfig with the
//            built-in defaults (no model named: the default one).
// Each must give a config or a user-facing zt::Error; a crash or an Internal error is a bug.
#include <cstdlib>

#include "config/accelerate_config.h"
#include "config/config_value.h"
#include "config/ds_config.h"
#include "config/run_config.h"
#include "core/error.h"
#include "fuzz_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zt::config;
  if (size == 0) return 0;
  const int mode = data[0] % 6;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (mode) {
      case 0: {
        const DsConfig ds = parse_ds_config(parse_document_text(text, "ds.json", DocumentFormat::Json), "ds.json");
        TrainConfig out;
        resolve_ds_config(ds, RunContext{}, out);
        break;
      }
      case 1:
        (void)parse_accelerate_config(parse_document_text(text, "acc.yaml", DocumentFormat::Yaml), "acc.yaml");
        break;
      case 2:
        (void)parse_run_config(parse_document_text(text, "run.yaml", DocumentFormat::Yaml), "run.yaml");
        break;
      default: {
        static const std::string run = zt::fuzz::scratch_path("_run.yaml");
        static const std::string ds = zt::fuzz::scratch_path("_ds.json");
        static const std::string acc = zt::fuzz::scratch_path("_acc.yaml");
        const std::string& path = mode == 3 ? run : mode == 4 ? ds : acc;
        zt::fuzz::write_file(path, data + 1, size - 1);
        if (mode == 3)
          (void)load_train_config({path});
        else if (mode == 4)
          (void)load_train_config({"--deepspeed", path});
        else
          (void)load_train_config({"--config_file", path});
      }
    }
  } catch (const zt::Error& e) {
    if (e.kind() == zt::ErrorKind::Internal) std::abort();
  }
  return 0;
}

namespace zt::fuzz {
std::vector<std::string> seeds() {
  const std::string ds =
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,)"
      R"( "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8}},)"
      R"( "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100}},)"
      R"( "fp16": {"enabled": "auto", "loss_scale": 0}, "gradient_clipping": 1.0,)"
      R"( "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},)"
      R"( "stage3_prefetch_bucket_size": 5e8, "overlap_comm": true}})";
  const std::string acc =
      "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 1\n"
      "deepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 4\n"
      "  gradient_clipping: 1.0\n";
  const std::string run =
      "learning_rate: 3e-4\nper_device_train_batch_size: 4\nmax_steps: 10\nwarmup_steps: 2\nseed: 7\n"
      "lr_scheduler_type: cosine\nlora:\n  r: 8\n  lora_alpha: 16\n  target_modules: [q_proj, v_proj]\n"
      "anchors: &a {x: 1}\nsamples:\n  every: 5\n  tokens: 16\n";
  std::string bomb = "a: &a xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n";
  for (char c = 'b'; c <= 'h'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", " : "") + "*" + static_cast<char>(c - 1);
    bomb += "]\n";
  }
  return {"0" + ds,
          "1" + acc,
          "2" + run,
          "3" + run,
          "4" + ds,
          "5" + acc,
          "3" + bomb,
          "0" + std::string(R"({"train_batch_size": 8, "train_batch_size": 16})"),
          "4" + std::string(R"({"zero_optimization": {"stage": 2, "stage": 3}})"),
          "2" + std::string(200, '[') + std::string(200, ']'),
          "0{\"a\": " + std::string(200, '[') + std::string(200, ']') + "}"};
}
}  // namespace zt::fuzz
