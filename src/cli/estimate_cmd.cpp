// zerotrain estimate: the memory a training run needs, before trying it (DeepSpeed's
// estimate_zero2/3_model_states_mem_needs_all_live); the work is in train/estimate.h.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "config/config_value.h"
#include "core/error.h"
#include "model/config.h"
#include "model/hf_dir.h"
#include "model/lora_config.h"
#include "train/estimate.h"

namespace zt::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHelp = R"(usage: zerotrain estimate --model M [options]

The memory a training run needs per GPU and per node's host memory, before trying it:
zerotrain's own figures (model states as the ZeRO engine divides them, the units in
flight, the step's activations and LM-head logits) beside DeepSpeed's formulas for the
same inputs (estimate_zero2/3_model_states_mem_needs, model states only).

  --model M                   a preset (gpt2, gpt2-xl, llama-3.2-1b, llama-2-7b, ...), a HF
                              model directory or its config.json
  --stage S                   ZeRO stage 0-3 (default 2)
  --offload-optimizer DEV     none, cpu or nvme (default none; stage >= 1)
  --offload-param DEV         none, cpu or nvme (default none; stage 3)
  --gpus-per-node G           (default 1)
  --nodes N                   (default 1)
  --micro-batch B             per GPU (default 8)
  --seq-len T                 tokens per sample (default: 1024, or the model's context if less)
  --activation-checkpointing  keep each block's input (and attention output) only
  --precision P               bf16 (default), fp16 or fp32
  --additional-buffer-factor F  DeepSpeed's (default 1.5)
  --peft FILE|DIR             LoRA: a PEFT adapter_config.json (or its folder); the base is
                              frozen, gradients and optimizer state are the adapters' only
  --lora-r R                  LoRA of rank R (alpha = R) on --lora-targets
  --lora-targets LIST         with --lora-r: module names, comma-separated, or all-linear
                              (default all-linear)
  --json                      one JSON object instead of the table

--offload-optimizer cpu is what a run allocates; --offload-param and nvme figures are
the planned layout (not implemented yet).
)";

config::OffloadDevice parse_offload(const std::string& flag, const std::string& v) {
  if (v == "none") return config::OffloadDevice::None;
  if (v == "cpu") return config::OffloadDevice::CPU;
  if (v == "nvme") return config::OffloadDevice::NVMe;
  ZT_THROW_INPUT(flag, " '", v, "': give none, cpu or nvme", config::did_you_mean(v, {"none", "cpu", "nvme"}));
}

config::Precision parse_precision(const std::string& v) {
  if (v == "bf16") return config::Precision::BF16;
  if (v == "fp16") return config::Precision::F16;
  if (v == "fp32") return config::Precision::F32;
  ZT_THROW_INPUT("--precision '", v, "': give bf16, fp16 or fp32", config::did_you_mean(v, {"bf16", "fp16", "fp32"}));
}

// A preset name, a HF directory, or a config.json file.
model::ModelConfig load_model(const std::string& m) {
  std::error_code ec;
  if (fs::is_directory(m, ec)) return model::load_hf_config(m);
  // An HF config.json: Python's json keeps the last of a repeated key, and so does this.
  if (fs::is_regular_file(m, ec))
    return model::config_from_hf_json(config::load_document(m, config::DuplicateKeys::LastWins), m);
  const auto presets = model::preset_names();
  if (std::find(presets.begin(), presets.end(), m) != presets.end()) return model::preset_config(m);
  std::string list;
  for (const auto& p : presets) list += (list.empty() ? "" : ", ") + p;
  ZT_THROW_INPUT("--model '", m, "': not a preset, a directory or a file", config::did_you_mean(m, presets),
                 "; presets: ", list);
}

int run_estimate(const Args& args) {
  train::EstimateInput in;
  std::string model;
  bool as_json = false, seq_given = false;
  ArgParser p("estimate");
  p.value("--model", [&](const std::string& v) { model = v; });
  p.value("--stage", [&](const std::string& v) { in.stage = static_cast<int>(parse_int("--stage", v)); });
  p.value("--offload-optimizer",
          [&](const std::string& v) { in.offload_optimizer = parse_offload("--offload-optimizer", v); });
  p.value("--offload-param", [&](const std::string& v) { in.offload_param = parse_offload("--offload-param", v); });
  p.value("--gpus-per-node",
          [&](const std::string& v) { in.gpus_per_node = static_cast<int>(parse_int("--gpus-per-node", v)); });
  p.value("--nodes", [&](const std::string& v) { in.nodes = static_cast<int>(parse_int("--nodes", v)); });
  p.value("--micro-batch", [&](const std::string& v) { in.micro_batch = parse_int("--micro-batch", v); });
  p.value("--seq-len", [&](const std::string& v) {
    in.seq_len = parse_int("--seq-len", v);
    seq_given = true;
  });
  p.flag("--activation-checkpointing", [&] { in.activation_checkpointing = true; });
  p.value("--precision", [&](const std::string& v) { in.precision = parse_precision(v); });
  p.value("--additional-buffer-factor",
          [&](const std::string& v) { in.additional_buffer_factor = parse_double("--additional-buffer-factor", v); });
  std::string peft, lora_targets = "all-linear";
  int64_t lora_r = 0;
  p.value("--peft", [&](const std::string& v) { peft = v; });
  p.value("--lora-r", [&](const std::string& v) { lora_r = parse_int("--lora-r", v); });
  p.value("--lora-targets", [&](const std::string& v) { lora_targets = v; });
  p.flag("--json", [&] { as_json = true; });
  p.parse(args);
  if (!peft.empty() && lora_r != 0) ZT_THROW_INPUT("estimate: give --peft or --lora-r, not both");
  if (!peft.empty()) {
    in.lora = model::load_lora_config(peft);
    in.lora_source = peft;
  } else if (lora_r != 0) {
    model::LoraConfig l;
    l.r = lora_r;
    l.lora_alpha = static_cast<double>(lora_r);
    if (lora_targets == "all-linear") {
      l.target_form = model::LoraTargetForm::AllLinear;
    } else {
      for (size_t start = 0; start <= lora_targets.size();) {
        const size_t comma = std::min(lora_targets.find(',', start), lora_targets.size());
        if (comma > start) l.target_modules.push_back(lora_targets.substr(start, comma - start));
        start = comma + 1;
      }
    }
    l.validate("--lora-r / --lora-targets");
    in.lora = l;
    in.lora_source = "--lora-r " + std::to_string(lora_r) + " --lora-targets " + lora_targets;
  }
  if (model.empty()) ZT_THROW_INPUT("zerotrain estimate: give --model (a preset, a HF directory or a config.json)");
  in.model = load_model(model);
  in.model_name = model;
  if (!seq_given) in.seq_len = std::min<int64_t>(1024, in.model.max_position_embeddings);
  const train::MemoryEstimate e = train::estimate_memory(in);
  const std::string text = as_json ? train::estimate_json(in, e).dump(2) + "\n" : train::describe_estimate(in, e);
  std::fputs(text.c_str(), stdout);
  return 0;
}

const Registrar registrar{
    {"estimate", "the memory a run needs per GPU and per node, beside DeepSpeed's formulas", run_estimate, kHelp}};

}  // namespace
}  // namespace zt::cli
