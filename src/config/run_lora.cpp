// LoRA settings of a run (see run_lora.h).
#include "config/run_lora.h"

#include "core/error.h"
#include "model/lora_config.h"

namespace zt::config {

namespace {

// The run file's spelling of a PEFT key (lora.alpha for lora_alpha, ...).
std::string run_key_of(const std::string& peft_key) {
  if (peft_key == "lora_alpha") return "alpha";
  if (peft_key == "lora_dropout") return "dropout";
  return peft_key;
}

}  // namespace

void apply_run_lora(const RunConfig& run, TrainConfig& cfg) {
  const int given = run.lora.has_value() + !run.peft.empty() + !run.adapter.empty();
  if (given > 1)
    ZT_THROW_INPUT(run.source, ": ", run.lora ? "a lora: section" : "", run.lora && !run.peft.empty() ? " and " : "",
                   run.peft.empty() ? "" : "peft (" + run.peft + ")",
                   !run.adapter.empty() && (run.lora || !run.peft.empty()) ? " and " : "",
                   run.adapter.empty() ? "" : "adapter (" + run.adapter + ")",
                   " each give the LoRA settings; keep one (an adapter folder brings its own adapter_config.json)");
  if (run.lora) {
    cfg.lora = run.lora;
    cfg.lora_source = run.lora_where;
    cfg.origin["lora"] = run.source;
  } else if (!run.peft.empty()) {
    cfg.lora = model::load_lora_config(run.peft);
    cfg.lora_source = run.peft;
    cfg.origin["lora"] = run.peft;
  } else if (!run.adapter.empty()) {
    cfg.lora = model::load_lora_config(run.adapter);
    cfg.lora_source = run.adapter + "/adapter_config.json";
    cfg.adapter = run.adapter;
    cfg.origin["lora"] = cfg.lora_source;
    cfg.origin["adapter"] = run.source;
  }
}

std::string lora_setting_name(const TrainConfig& cfg, const std::string& peft_key) {
  // A run file's section is named "<file>: lora"; a PEFT file is the file itself.
  const std::string suffix = ": lora";
  const std::string& s = cfg.lora_source;
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    return s + "." + run_key_of(peft_key);
  return s + ": " + peft_key;
}

void check_lora_run(const TrainConfig& cfg) {
  // bias and modules_to_save are checked against the model (its head tied or not, its packed
  // biases) by lora_model_options, when the model's shape is known.
  (void)cfg;
}

}  // namespace zt::config
