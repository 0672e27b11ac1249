#include "config/config_dump.h"
#include "core/strings.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "config/config_keys.h"

namespace zt::config {

const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : p == Precision::F16 ? "fp16" : "fp32";
}
const char* offload_device_name(OffloadDevice d) {
  return d == OffloadDevice::CPU ? "cpu" : d == OffloadDevice::NVMe ? "nvme" : "none";
}
namespace {

class Printer {
 public:
  explicit Printer(const TrainConfig& c) : c_(c) {}
  void section(const std::string& name) { out_ << "\n[" << name << "]\n"; }
  template <class T>
  void line(const std::string& key, const T& value) {
    std::ostringstream v;
    v << std::boolalpha << value;
    std::string text = key + " = " + v.str();
    if (text.size() < 52) text.resize(52, ' ');
    auto it = c_.origin.find(key);
    out_ << "  " << text << "  [" << (it == c_.origin.end() ? "default" : it->second) << "]\n";
  }
  std::string str() const { return out_.str(); }

 private:
  const TrainConfig& c_;
  std::ostringstream out_;
};

std::string joined(const std::vector<std::string>& v) {
  const std::string s = join(v, ", ");
  return s.empty() ? "(built-in)" : s;
}

}  // namespace

std::string describe_config(const TrainConfig& c) {
  Printer p(c);
  p.section("run");
  p.line("model", !c.model.path.empty()          ? c.model.path
                  : !c.model.config_file.empty() ? "config " + c.model.config_file + " (random init)"
                                                 : "preset " + c.model.preset);
  p.line("model.tokenizer", c.model.tokenizer.empty() ? "(from the model)" : c.model.tokenizer);
  p.line("model.activation_checkpointing", c.model.activation_checkpointing);
  p.line("data.train", joined(c.data.train));
  p.line("data.validation", c.data.validation.empty() ? "(split off train)" : joined(c.data.validation));
  p.line("data.jsonl_field", c.data.jsonl_field);
  p.line("data.chat_template", c.data.chat_template.empty() ? std::string("(the tokenizer's)") : c.data.chat_template);
  p.line("data.skip_bad_records", c.data.skip_bad_records);
  p.line("data.packing", c.data.packing);
  p.line("data.seq_len", c.data.seq_len == 0 ? std::string("(model context)") : std::to_string(c.data.seq_len));
  p.line("max_steps", c.max_steps);
  p.line("epochs", c.epochs);
  p.line("eval_interval", c.eval_interval);
  p.line("eval_batches", c.eval_batches);
  p.line("save_interval", c.save_interval);
  p.line("save_strategy", c.checkpoint_saves == CheckpointSaves::None    ? "no"
                          : c.checkpoint_saves == CheckpointSaves::Epoch ? "epoch"
                                                                         : "steps");
  p.line("eval_strategy", c.evaluations == Evaluations::None    ? "no"
                          : c.evaluations == Evaluations::Epoch ? "epoch"
                                                                : "steps");
  p.line("keep_last", c.keep_last);
  if (c.load_best_model_at_end) p.line("load_best_model_at_end", "true (metric: validation loss)");
  if (c.early_stopping_patience > 0)
    p.line("early_stopping", std::to_string(c.early_stopping_patience) + " evaluations, threshold " +
                                 std::to_string(c.early_stopping_threshold));
  p.line("output_dir", c.output_dir);
  p.line("overwrite_output_dir", c.overwrite_output_dir == OutputDirOverwrite::Yes);
  p.line("stop_grace_seconds", c.stop_grace_seconds);
  p.line("seed", c.seed);
  if (c.data_seed) p.line("data_seed", *c.data_seed);
  if (c.eval_batch_size > 0) p.line("per_device_eval_batch_size", c.eval_batch_size);
  p.line("steps_per_print", c.steps_per_print);
  p.line("resume", c.resume.empty() ? std::string("(no)") : c.resume);
  p.line("device", c.device);
  p.line("samples.tokens", c.sample_tokens);
  if (c.lora) {
    // LoRA (docs/lora.md): the settings as PEFT names them, from where they came.
    const model::LoraConfig& l = *c.lora;
    p.section("lora");
    std::ostringstream targets;
    if (l.target_form == model::LoraTargetForm::AllLinear)
      targets << "all-linear";
    else if (l.target_form == model::LoraTargetForm::Regex)
      targets << "regex " << l.target_regex;
    else
      targets << "[" << joined(l.target_modules) << "]";
    std::ostringstream summary;
    summary << "r " << l.r << ", lora_alpha " << l.lora_alpha << " (scaling " << l.scaling() << "), lora_dropout "
            << l.lora_dropout << ", target_modules " << targets.str() << (l.use_rslora ? ", use_rslora" : "")
            << (l.init_lora_weights == model::LoraInit::Gaussian ? ", init gaussian" : "");
    if (l.bias != model::LoraBias::None) summary << ", bias " << model::lora_bias_name(l.bias);
    if (!l.modules_to_save.empty()) summary << ", modules_to_save [" << joined(l.modules_to_save) << "]";
    p.line("lora", summary.str());
    p.line("adapter", c.adapter.empty() ? std::string("(PEFT's init)") : c.adapter);
  }

  p.section("batch");
  p.line("world_size", c.world_size);
  p.line("train_micro_batch_size_per_gpu", c.micro_batch_per_gpu);
  p.line("gradient_accumulation_steps", c.grad_accum_steps);
  p.line("train_batch_size", c.train_batch_size);

  p.section("precision");
  p.line("precision", precision_name(c.precision));
  if (c.precision != Precision::F32)
    p.line("master_weights", c.optimizer.master_weights == zero::MasterWeights::F32
                                 ? std::string("true (f32 master, f32 optimizer state)")
                                 : std::string("false (bf16 parameters and optimizer state, no master)"));
  if (c.precision == Precision::F16) {
    // The loss scaler's keys, from the fp16 table (enabled is the precision line above).
    for (const Fp16Key& k : fp16_keys()) {
      if (k.key == "enabled" || k.status != KeyStatus::Resolved) continue;
      const double v = key_value(k, c.fp16);
      p.line("fp16." + k.key, k.key == "loss_scale" && v == 0 ? std::string("dynamic") : key_value_text(k, v));
    }
  }

  p.section("optimizer");
  const auto& o = c.optimizer;
  p.line("optimizer.type", zero::optimizer_type_name(o.type));
  p.line("optimizer.params.lr", o.lr);
  if (o.type == zero::OptimizerType::SGD) {
    p.line("optimizer.params.momentum", o.momentum);
    p.line("optimizer.params.nesterov", o.nesterov);
  } else {
    p.line("optimizer.params.betas[0]", o.beta1);
    p.line("optimizer.params.betas[1]", o.beta2);
    if (o.type != zero::OptimizerType::Lion) p.line("optimizer.params.eps", o.eps);
  }
  p.line("optimizer.params.weight_decay", o.weight_decay);
  if (o.type == zero::OptimizerType::Adam) p.line("optimizer.params.adam_w_mode", o.adam_w_mode);
  p.line("gradient_clipping", c.gradient_clipping);
  if (!c.scheduler.empty()) {
    p.line("scheduler", c.scheduler.dump());
  } else {
    p.line("lr_scheduler_type", c.hf_scheduler.empty() ? std::string("constant") : c.hf_scheduler);
    p.line("warmup_steps", c.warmup_steps);
  }

  p.section("zero_optimization");
  const auto& z = c.zero;
  for (const ZeroKey& k : zero_keys()) {
    if (k.shown == Shown::No || (k.shown == Shown::Stage3 && z.stage != 3)) continue;
    const double v = key_value(k, z);
    if (k.type == KeyType::Bool) {
      p.line("zero_optimization." + k.key, v != 0);
    } else {
      p.line("zero_optimization." + k.key, saturating_int64(v));
    }
  }
  if (z.stage == 3) p.line("zero3_init", z.zero3_init);
  p.line("zero_optimization.offload_optimizer",
         std::string(offload_device_name(z.offload_optimizer.device)) +
             (z.offload_optimizer.nvme_path.empty() ? "" : " " + z.offload_optimizer.nvme_path));
  p.line("zero_optimization.offload_param",
         std::string(offload_device_name(z.offload_param.device)) +
             (z.offload_param.nvme_path.empty() ? "" : " " + z.offload_param.nvme_path));
  if (z.offload_param.device == OffloadDevice::NVMe) {
    // How much of the parameters stays in host memory and what swaps the rest.
    p.line("zero_optimization.offload_param.max_in_cpu", z.offload_param.max_in_cpu);
    p.line("zero_optimization.offload_param.buffer_count", z.offload_param.buffer_count);
    p.line("zero_optimization.offload_param.buffer_size", z.offload_param.buffer_size);
  }
  if (z.offload_optimizer.device == OffloadDevice::NVMe || z.offload_param.device == OffloadDevice::NVMe) {
    p.line("aio.block_size", c.aio.block_size);
    p.line("aio.queue_depth", c.aio.queue_depth);
  }

  if (c.launch.num_processes > 0 || c.launch.distributed_type != "NO") {
    p.section("launch");
    p.line("distributed_type", c.launch.distributed_type);
    p.line("num_processes", c.launch.num_processes);
    p.line("num_machines", c.launch.num_machines);
    p.line("main_process_port", c.launch.main_process_port);
  }
  std::string s = "resolved config (" + c.source + ")\n" + p.str();
  for (const auto& w : c.warnings) s += "\nnote: " + w;
  return s;
}

}  // namespace zt::config
