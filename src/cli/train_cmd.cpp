// zerotrain train [run.yaml] [--deepspeed ds_config.json] [--config_file accelerate.yaml]
//                 [--section.key value ...]
// With no run config: the built-in run (examples/default_run.yaml: a tiny GPT-2 on the
// repo's text, tokenizer trained first, then a sample); overrides, a ds_config and an
// Accelerate YAML apply to it (config::RunDocument::BuiltIn). A command line naming a model
// or data is a run of its own instead, with HF Trainer's defaults for what it leaves out.
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "comm/env.h"
#include "config/run_config.h"
#include "train/trainer.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain train [run.yaml|run.json] [--deepspeed ds_config.json]
                       [--config_file accelerate.yaml] [--section.key value ...]

Trains a model as the configs say (docs/configs.md lists every key). Without a run
config, runs the built-in example (examples/default_run.yaml): a tiny GPT-2 trained for
about two minutes on the license texts in data/text, with a byte-level BPE tokenizer
trained on them first, then a sample. A ds_config or Accelerate YAML given without a run
config trains the built-in run with its settings (its batch sizes, optimizer, schedule,
clipping, precision and logging replace the built-in run's own). A command line that
names a model (--model_name_or_path DIR, --model.path, --model.preset) or data
(--data.train PATH) is a run of its own instead: what it leaves out takes HF Trainer's
defaults (docs/configs.md), and an existing run in output_dir is refused.

Relative paths given here are taken from the current directory; those written in a
config file from that file's directory ($PWD/PATH in a file: the current directory).

  run.yaml                run config: model, data, steps/epochs, eval, checkpoints,
                          output_dir, samples, and HF Trainer keys (learning_rate, ...)
  --deepspeed FILE        a DeepSpeed ds_config.json, read unchanged
  --config_file FILE      an Accelerate config YAML (may point at a ds_config)
  --KEY VALUE             override any key, e.g. --max_steps 20, --learning_rate 1e-3,
                          --optimizer.params.lr 3e-4, --zero_optimization.stage 2
  --resume latest|auto|DIR  continue from output_dir/checkpoints/latest or a checkpoint
                          (auto: the latest when there is one, else from the start)
  --lora.r R --lora.target_modules LIST
                          LoRA on a frozen base (docs/lora.md; all lora.* keys are PEFT's
                          LoraConfig's); final/ is then a PEFT adapter folder
  --peft FILE             the LoRA settings from PEFT's adapter_config.json
  --adapter DIR           continue training a PEFT adapter folder (its settings and tensors)
  --overwrite_output_dir  replace the run already in output_dir (without it, or
                          --resume, a new run there exits 2 and changes nothing)
  --threads N             CPU threads (default: all cores)
  --log-level LEVEL       debug, info, warn, error

Writes to output_dir: checkpoints/global_stepN/ (+ latest), metrics.jsonl, final/ (an HF
model directory with its tokenizer; with LoRA the PEFT adapter folder). One run at a time
per output_dir (a lock).
SIGINT/SIGTERM/SIGUSR1 stop at the next step (or micro-batch) boundary, save a
checkpoint and exit 0; more SIGTERMs are absorbed; a third SIGINT exits at once
(docs/checkpoints.md#stop-signals).
)";

int run_train(const Args& raw) {
  // Process-level flags are taken here; everything else goes to the config loader.
  Args args;
  bool has_run_config = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    const std::string& a = raw[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (a.size() > flag.size() && a[flag.size()] == '=') return a.substr(flag.size() + 1);
      if (i + 1 >= raw.size()) ZT_THROW_INPUT(flag, " needs a value");
      return raw[++i];
    };
    if (a == "--threads" || a.rfind("--threads=", 0) == 0) {
      apply_threads_flag(value("--threads"));
    } else if (a == "--log-level" || a.rfind("--log-level=", 0) == 0) {
      set_log_level(parse_log_level(value("--log-level")));
    } else {
      // A run config is the first positional argument (not the value of a --key). A
      // ds_config or Accelerate YAML alone trains the built-in run with those settings.
      if (a.rfind("--", 0) != 0 && (i == 0 || raw[i - 1].rfind("--", 0) != 0)) has_run_config = true;
      args.push_back(a);
    }
  }
  config::LoadOptions lo;
  // No run file: the built-in demo when the command line names neither a model nor data;
  // otherwise the command line is the run, with HF Trainer's defaults for what it leaves
  // out (not the demo's lr, batch, warmup or overwrite_output_dir, which replaced a
  // previous run's checkpoints), and an existing run in output_dir is refused as for a
  // run file.
  if (!has_run_config && !config::command_line_names_model_or_data(args)) {
    args.insert(args.begin(), std::string(ZT_SOURCE_DIR) + "/examples/default_run.yaml");
    lo.run_document = config::RunDocument::BuiltIn;
  }
  // The batch arithmetic uses the job's real world size (every rank is started by the
  // launcher with the same command line).
  const comm::LaunchEnv job = comm::read_launch_env();
  lo.world_size = job.world_size;
  lo.world_source = job.source == "default" ? config::WorldSource::PlainProcess : config::WorldSource::Launcher;
  const config::TrainConfig config = config::load_train_config(args, lo);
  train::run_training(config);
  return 0;
}

const Registrar registrar{
    {"train", "train a model (no config: the built-in tiny GPT on the repo's text)", run_train, kHelp}};

}  // namespace
}  // namespace zt::cli
