// The run-config table: every key a run config (YAML or JSON) may hold, its HF
// TrainingArguments aliases, default and doc line. The known-key checks of the top level
// and of model/data/samples, the alias mapping, the origins `config check` prints and the
// docs/configs.md table derive from it; run_config.cpp reads the values.
#include <algorithm>

#include "config/config_keys.h"

namespace zt::config {

namespace {

std::vector<RunKey> make_table() {
  return {
      {"model.preset",
       {},
       "tiny-gpt2",
       "model",
       "a built-in preset; `model: NAME` is a preset name, else an HF directory"},
      {"model.path",
       {"model_name_or_path", "model.name_or_path"},
       "—",
       "model",
       "an HF model directory (config.json + safetensors); not with model.preset"},
      {"model.config",
       {},
       "—",
       "model",
       "an HF config.json: a model of that shape (any family zerotrain reads), randomly initialised, as "
       "transformers' `AutoModelForCausalLM.from_config`; not with model.preset or model.path"},
      {"model.tokenizer", {}, "the model's (trained for a preset or model.config)", "", "a tokenizer file or directory"},
      {"model.activation_checkpointing", {"gradient_checkpointing"}, "false", "", "recompute each block in backward (selective: attention output kept)"},
      {"data.train", {}, "built-in text", "", "a path or a list: text files/dirs, JSONL, or token shards (.bin)"},
      {"data.validation", {}, "split off train", "", "a path or a list"},
      {"data.jsonl_field", {}, "text", "", "the JSONL field holding the text"},
      {"data.chat_template", {}, "the tokenizer's", "", "SFT conversations: chatml, llama3, mistral, alpaca or a Jinja file"},
      {"data.skip_bad_records", {}, "false", "", "count and skip JSONL records that cannot be read (else exit 2 naming file:line)"},
      {"data.packing",
       {},
       "false",
       "",
       "SFT samples: false = each its own padded window; true = packed into seq_len windows, attention and "
       "positions kept inside each sample (HF's position_ids)"},
      {"data.seq_len", {"seq_len"}, "0 (model context)", "", "tokens per sequence (at most 2^24)"},
      {"data.validation_fraction", {}, "0.05", "", "split off the train text when no validation set is given"},
      {"max_steps",
       {},
       "0 (use epochs)",
       "",
       "global steps, as DeepSpeed counts them: an fp16 step skipped on overflow counts (`max_steps - skipped` "
       "optimizer updates)"},
      {"epochs", {"num_train_epochs"}, "1", "", "when max_steps is 0"},
      {"eval_interval", {"eval_steps"}, "0 (end only)", "", "steps between evaluations"},
      {"eval_batches", {}, "20", "", "batches per evaluation"},
      {"per_device_eval_batch_size",
       {},
       "0 (the training micro batch)",
       "",
       "sequences per evaluation batch (HF's name; its default 8 is not taken, so evaluation matches the training "
       "batch unless set)"},
      {"save_interval", {"save_steps"}, "0 (end only)", "", "steps between checkpoints"},
      {"save_strategy",
       {},
       "steps",
       "",
       "`steps`: checkpoints every `save_interval` steps and at the end; `epoch`: at the end of every epoch and at "
       "the end; `no`: none (a stop signal still saves); final/ is written either way"},
      {"eval_strategy",
       {"evaluation_strategy"},
       "steps",
       "",
       "`steps`: evaluates every `eval_interval` steps and at the end; `epoch`: at the end of every epoch and at the "
       "end; `no`: never (HF's default is `no`; zerotrain's keeps its end-of-run evaluation)"},
      {"keep_last", {"save_total_limit"}, "2", "", "checkpoints kept (and the best one, with load_best_model_at_end)"},
      {"load_best_model_at_end",
       {},
       "false",
       "",
       "final/ is the saved checkpoint with the best validation loss (HF's checks: eval_strategy = save_strategy, "
       "save_steps a multiple of eval_steps)"},
      {"metric_for_best_model", {}, "loss", "", "loss or eval_loss (the validation loss: the metric a run computes)"},
      {"greater_is_better", {}, "false", "", "true: a larger metric is better"},
      {"early_stopping_patience",
       {},
       "0 (off)",
       "",
       "HF's EarlyStoppingCallback: stop after this many evaluations without an improvement"},
      {"early_stopping_threshold", {}, "0", "", "the improvement an evaluation must beat to reset the patience"},
      {"report_to",
       {},
       "none",
       "",
       "`tensorboard` (or `all`): TensorBoard event files of every step line's numbers and the validation loss; "
       "other trackers are accepted with a warning (metrics.jsonl has the numbers)"},
      {"logging_dir", {}, "output_dir/runs", "", "where report_to: tensorboard writes its event files"},
      {"tf32", {}, "false", "", "accepted with a warning (f32 GEMMs run in full f32)"},
      {"dataloader_num_workers", {}, "0", "", "accepted with a warning (memory-mapped shards, no loader workers)"},
      {"output_dir",
       {},
       "out",
       "",
       "one run at a time (a lock); a new run into a directory holding a run exits 2 "
       "(docs/checkpoints.md#output-directory)"},
      {"overwrite_output_dir",
       {},
       "false",
       "",
       "true (`--overwrite_output_dir`): a run without `--resume` replaces the run in output_dir (its checkpoints/, "
       "final/, metrics.jsonl)"},
      {"stop_grace_seconds",
       {},
       "0 (none)",
       "",
       "seconds from the first stop signal to an immediate exit (128 + the signal) when the stop's save has not "
       "finished (docs/checkpoints.md#stop-signals)"},
      {"seed", {}, "1234", "", ""},
      {"data_seed", {}, "seed", "", "the seed of the data order (training and validation batches) alone, as HF's"},
      {"steps_per_print", {"logging_steps", "log_interval"}, "10", "", ""},
      {"resume", {"resume_from_checkpoint"}, "\"\"", "", "\"\" \\| latest \\| auto \\| a checkpoint dir"},
      {"device",
       {},
       "auto",
       "",
       "auto (cuda when a GPU is visible and the build has the CUDA backend, else cpu) \\| cpu \\| cuda"},
      {"samples.prompts", {}, "—", "", "a string or a list, printed after training"},
      {"samples.tokens", {}, "0", "", "tokens sampled per prompt (at most 2^20; samples are checked at start)"},
      {"samples.temperature", {}, "0.8", "", "in [0, 1e4] (0: greedy)"},
      {"samples.top_k", {}, "40", "", "0 (off) to 2^31-1"},
      {"lora.r", {}, "8", "", "LoRA (docs/lora.md): the adapters' rank; a `lora:` section freezes the base model"},
      {"lora.alpha", {"lora.lora_alpha"}, "8", "", "scaling = alpha / r (alpha / sqrt(r) with use_rslora)"},
      {"lora.dropout", {"lora.lora_dropout"}, "0", "", "dropout on the adapters' input, in [0, 1)"},
      {"lora.target_modules",
       {},
       "— (required)",
       "",
       "a list of module names as PEFT matches them (q_proj, v_proj, c_attn, mlp.c_proj, ...), `all-linear`, or a "
       "regular expression over the module paths; a name the model lacks exits 2 listing those it has"},
      {"lora.bias", {}, "none", "",
       "none, all (every bias trained) or lora_only (the adapted linears' biases), as PEFT"},
      {"lora.use_rslora", {}, "false", "", "true: scaling = alpha / sqrt(r)"},
      {"lora.init_lora_weights",
       {},
       "true",
       "",
       "true: A Kaiming-uniform, B zero (PEFT's); `gaussian`: A normal with std 1/r, B zero"},
      {"lora.modules_to_save", {}, "[]", "", "lm_head and/or the token embedding (embed_tokens; GPT-2: wte): full trained copies, saved as PEFT does; a copy of a tied head or embedding unties them, as PEFT's does; other modules exit 2"},
      {"lora.fan_in_fan_out",
       {},
       "false",
       "",
       "PEFT's flag for GPT-2's Conv1D weights; final/'s adapter_config.json says true for GPT-2, as PEFT sets it"},
      {"peft",
       {},
       "—",
       "",
       "a PEFT adapter_config.json giving the LoRA settings (`--peft FILE`); not with a `lora:` section"},
      {"adapter",
       {},
       "—",
       "",
       "a PEFT adapter folder (adapter_config.json + adapter_model.safetensors) the adapters start from (`--adapter "
       "DIR`); its config gives the LoRA settings"},
      {"learning_rate", {}, "5e-5", "", "optimizer lr (HF default)"},
      {"per_device_train_batch_size", {}, "8", "", "micro batch (at most 2^24)"},
      {"gradient_accumulation_steps", {}, "1", "", "at most 2^24"},
      {"warmup_steps", {}, "0", "", ""},
      {"warmup_ratio", {}, "0", "", "fraction of total steps; not with warmup_steps"},
      {"lr_scheduler_type",
       {},
       "linear",
       "",
       "constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial, inverse_sqrt (HF's "
       "defaults for their arguments); reduce_lr_on_plateau, cosine_with_min_lr and warmup_stable_decay refused"},
      {"weight_decay", {}, "0", "", ""},
      {"max_grad_norm", {}, "1.0", "", "clipping (0 = off)"},
      {"adam_beta1", {}, "0.9", "", ""},
      {"adam_beta2", {}, "0.999", "", ""},
      {"adam_epsilon", {}, "1e-8", "", ""},
      {"optim", {}, "adamw", "", "adamw (adamw_torch, adamw_torch_fused, adamw_hf), adam, sgd, lion (lion_32bit)"},
      {"bf16", {}, "false", "", "mixed precision (not with fp16)"},
      {"fp16", {}, "false", "", "mixed precision (not with bf16)"},
      {"master_weights",
       {},
       "true",
       "",
       "false: bf16 parameters and optimizer state, no f32 master copy (bf16 only; see below)"},
      {"deepspeed", {}, "—", "", "ds_config path"},
      {"accelerate_config", {}, "—", "", "Accelerate YAML path"},
  };
}

std::string section_of(const std::string& key) {
  const auto dot = key.find('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

const std::vector<RunKey>& run_keys() {
  static const std::vector<RunKey> table = make_table();
  return table;
}

std::vector<std::string> run_top_level_spellings() {
  std::vector<std::string> all;
  for (const RunKey& k : run_keys()) {
    const std::string section = section_of(k.key);
    add_unique(all, section.empty() ? k.key : section);
    for (const std::string& a : k.aliases)
      if (section_of(a).empty()) add_unique(all, a);
  }
  return all;
}

std::vector<std::string> run_section_keys(const std::string& section) {
  std::vector<std::string> keys;
  const std::string pre = section + ".";
  for (const RunKey& k : run_keys()) {
    if (k.key.rfind(pre, 0) == 0) add_unique(keys, k.key.substr(pre.size()));
    for (const std::string& a : k.aliases)
      if (a.rfind(pre, 0) == 0) add_unique(keys, a.substr(pre.size()));
  }
  return keys;
}

std::string canonical_run_key(const std::string& spelling) {
  for (const RunKey& k : run_keys()) {
    if (k.key == spelling) return k.key;
    for (const std::string& a : k.aliases) {
      if (a == spelling) return k.key;
      // "--save_steps.x": an alias as the first part of a longer dotted key.
      if (spelling.rfind(a + ".", 0) == 0) return k.key + spelling.substr(a.size());
    }
  }
  return spelling;
}

std::string run_origin_key(const std::string& canonical) {
  for (const RunKey& k : run_keys())
    if (k.key == canonical) return k.origin_key.empty() ? k.key : k.origin_key;
  return canonical;
}

}  // namespace zt::config
