// The run-config table: every key a run config (YAML or JSON) may hold, its HF
// TrainingArguments aliases, default, the field its value lands in, its range, whether it
// is a path, and its doc line. The known-key checks of the top level and of
// model/data/samples, the alias mapping, reading and range checks (run_config.cpp), the
// placing of paths, the values TrainConfig gets and the origins `config check` prints
// (run_config_load.cpp), and the docs/configs.md table all derive from it.
#include <algorithm>
#include <cstdint>

#include "config/config_keys.h"
#include "config/run_config.h"
#include "core/error.h"

namespace zt::config {

namespace {

// The ranges of the rows below; each names the key as the user wrote it.

template <int64_t Min>
void at_least(const RunValue& v, const Where& w, const std::string& name) {
  if (v.integer < Min) ZT_THROW_INPUT(w.key(name).str(), ": must be at least ", Min, ", got ", v.integer);
}

void not_negative(const RunValue& v, const Where& w, const std::string& name) {
  if (v.written && v.number < 0) ZT_THROW_INPUT(w.key(name).str(), ": must not be negative");
}

// The bound of each factor of a step's token count (micro batch, accumulation, seq_len):
// 2^24 each, so their product with the world size stays inside int64.
constexpr int64_t kMaxBatchFactor = int64_t{1} << 24;

// Sizes that are multiplied together (batch * accumulation * world * seq_len tokens per
// step) and allocated from: bounded far above any real run so that every product fits.
void at_most_batch_factor(const RunValue& v, const Where& w, const std::string& name) {
  if (v.integer > kMaxBatchFactor)
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.integer, " is too large; at most ", kMaxBatchFactor,
                   " (a value this size "
                   "would overflow the batch arithmetic or the memory it sizes)");
}

void check_batch_factor(const RunValue& v, const Where& w, const std::string& name) {
  at_least<1>(v, w, name);
  at_most_batch_factor(v, w, name);
}

void check_eval_batches(const RunValue& v, const Where& w, const std::string& name) {
  at_least<1>(v, w, name);
  at_most_batch_factor(v, w, name);
}

void check_eval_batch_size(const RunValue& v, const Where& w, const std::string& name) {
  at_most_batch_factor(v, w, name);
  if (v.integer < 0) ZT_THROW_INPUT(w.key(name).str(), ": must be positive (or 0: the training micro batch)");
}

void check_seq_len(const RunValue& v, const Where& w, const std::string& name) {
  if (v.integer < 0) ZT_THROW_INPUT(w.key(name).str(), ": must be positive (or 0 for the model's context)");
  if (v.integer > kMaxBatchFactor)
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.integer, " is too large; at most ", kMaxBatchFactor,
                   " tokens per sequence");
}

void check_validation_fraction(const RunValue& v, const Where& w, const std::string& name) {
  if (v.number < 0 || v.number >= 1) ZT_THROW_INPUT(w.key(name).str(), ": must be in [0, 1)");
}

// Patience and threshold are said together, under the patience's name.
void check_early_stopping(const RunValue& v, const Where& w, const std::string&) {
  if (v.number < 0)
    ZT_THROW_INPUT(w.key("early_stopping_patience").str(),
                   ": early_stopping_patience and early_stopping_threshold "
                   "must not be negative (patience 0: no early stopping)");
}

// Seconds from the first stop signal to an immediate exit when the step and the save have
// not ended by then (0: wait for them; a third SIGINT still exits at once).
void check_stop_grace(const RunValue& v, const Where& w, const std::string& name) {
  at_least<0>(v, w, name);
  if (v.integer > 86400)
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.integer,
                   " is more than a day; use 0 to wait for the save however long it takes");
}

// The end-of-run samples are generated after training: what they would refuse then is
// refused here, before the first step (the generator's own checks, and bounds that keep
// prompt + tokens and top_k inside their integer types).
constexpr int64_t kMaxSampleTokens = 1 << 20;
constexpr double kMaxSampleTemperature = 1e4;

void sample_not_negative(const RunValue& v, const Where& w) {
  if (v.number < 0) ZT_THROW_INPUT(w.str(), ": tokens, temperature and top_k must not be negative");
}

void check_sample_tokens(const RunValue& v, const Where& w, const std::string& name) {
  sample_not_negative(v, w);
  if (v.integer > kMaxSampleTokens)
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.integer, " is more than ", kMaxSampleTokens,
                   " tokens per sample; lower it (`zerotrain generate` writes longer texts)");
}

void check_sample_top_k(const RunValue& v, const Where& w, const std::string& name) {
  sample_not_negative(v, w);
  if (v.integer > INT32_MAX)
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.integer, " is too large; at most ", INT32_MAX,
                   " (a top_k above the vocabulary size keeps every token; 0 turns it off)");
}

void check_sample_temperature(const RunValue& v, const Where& w, const std::string& name) {
  sample_not_negative(v, w);
  if (!(v.number <= kMaxSampleTemperature))
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.number, " is not a temperature in [0, ", kMaxSampleTemperature,
                   "] (0 is greedy)");
}

// Adam divides by 1 - beta^t: a beta of 1 or more (or below 0) is out of the optimizer's
// range, as a ds_config's betas are (ds_config.cpp).
void check_beta(const RunValue& v, const Where& w, const std::string& name) {
  if (!(v.number >= 0 && v.number < 1))
    ZT_THROW_INPUT(w.key(name).str(), ": ", v.number, " is not in [0, 1) (Adam's moment decay)");
}

void check_epsilon(const RunValue& v, const Where& w, const std::string& name) {
  if (!(v.number >= 0)) ZT_THROW_INPUT(w.key(name).str(), ": must not be negative");
}

void check_max_grad_norm(const RunValue& v, const Where& w, const std::string& name) {
  if (v.number < 0) ZT_THROW_INPUT(w.key(name).str(), ": must be >= 0 (0 turns clipping off)");
}

void check_warmup_ratio(const RunValue& v, const Where& w, const std::string& name) {
  if (v.number < 0 || v.number > 1) ZT_THROW_INPUT(w.key(name).str(), ": must be in [0, 1]");
}

// These need arguments (a metric, min_lr, the phases) that lr_scheduler_kwargs would carry.
void check_lr_scheduler_type(const RunValue& v, const Where& w, const std::string& name) {
  for (const char* refused : {"reduce_lr_on_plateau", "cosine_with_min_lr", "warmup_stable_decay"})
    if (v.word == refused)
      ZT_THROW_UNSUPPORTED(
          w.key(name).str(), ": '", v.word,
          "' is not supported; use constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial or "
          "inverse_sqrt (or a ds_config scheduler block)");
}

// model: and data:.
std::vector<RunKey> model_and_data_rows() {
  return {
      {"model.preset",
       {},
       "tiny-gpt2",
       "model",
       "a built-in preset; `model: NAME` is a preset name, else an HF directory",
       &ModelSection::preset, ""},
      {"model.path",
       {"model_name_or_path", "model.name_or_path"},
       "—",
       "model",
       "an HF model directory (config.json + safetensors); not with model.preset",
       &ModelSection::path, "", nullptr, {}, RunPath::Yes},
      {"model.config",
       {},
       "—",
       "model",
       "an HF config.json: a model of that shape (any family zerotrain reads), randomly initialised, as "
       "transformers' `AutoModelForCausalLM.from_config`; not with model.preset or model.path",
       &ModelSection::config_file, "", nullptr, {}, RunPath::Yes},
      {"model.tokenizer", {}, "the model's (trained for a preset or model.config)", "", "a tokenizer file or directory",
       &ModelSection::tokenizer, "", nullptr, {}, RunPath::Yes},
      {"model.activation_checkpointing", {"gradient_checkpointing"}, "false", "", "recompute each block in backward (selective: attention output kept)",
       &ModelSection::activation_checkpointing, false},
      {"data.train", {}, "built-in text", "", "a path or a list: text files/dirs, JSONL, or token shards (.bin)",
       &DataSection::train, nullptr, nullptr, {}, RunPath::Yes},
      {"data.validation", {}, "split off train", "", "a path or a list",
       &DataSection::validation, nullptr, nullptr, {}, RunPath::Yes},
      {"data.jsonl_field", {}, "text", "", "the JSONL field holding the text",
       &DataSection::jsonl_field, "text"},
      {"data.chat_template", {}, "the tokenizer's", "", "SFT conversations: chatml, llama3, mistral, alpaca or a Jinja file",
       &DataSection::chat_template, "", nullptr, {}, RunPath::ChatTemplate},
      {"data.skip_bad_records", {}, "false", "", "count and skip JSONL records that cannot be read (else exit 2 naming file:line)",
       &DataSection::skip_bad_records, false},
      {"data.packing",
       {},
       "false",
       "",
       "SFT samples: false = each its own padded window; true = packed into seq_len windows, attention and "
       "positions kept inside each sample (HF's position_ids)",
       &DataSection::packing, false},
      {"data.seq_len", {"seq_len"}, "0 (model context)", "", "tokens per sequence (at most 2^24)",
       &DataSection::seq_len, 0, check_seq_len},
      {"data.validation_fraction", {}, "0.05", "", "split off the train text when no validation set is given",
       &DataSection::validation_fraction, 0.05, check_validation_fraction},
  };
}

// The loop: steps, evaluation, best model and early stopping, trackers, output, stop,
// seeds, resume, device, samples.
std::vector<RunKey> loop_rows() {
  return {
      {"max_steps",
       {},
       "0 (use epochs)",
       "",
       "global steps, as DeepSpeed counts them: an fp16 step skipped on overflow counts (`max_steps - skipped` "
       "optimizer updates)",
       &TrainConfig::max_steps, 0, at_least<0>},
      {"epochs", {"num_train_epochs"}, "1", "", "when max_steps is 0",
       &TrainConfig::epochs, 1.0},
      {"eval_interval", {"eval_steps"}, "0 (end only)", "", "steps between evaluations",
       &TrainConfig::eval_interval, 0, at_least<0>},
      {"eval_batches", {}, "20", "", "batches per evaluation",
       &TrainConfig::eval_batches, 20, check_eval_batches},
      {"per_device_eval_batch_size",
       {},
       "0 (the training micro batch)",
       "",
       "sequences per evaluation batch (HF's name; its default 8 is not taken, so evaluation matches the training "
       "batch unless set)",
       &TrainConfig::eval_batch_size, 0, check_eval_batch_size},
      {"save_interval", {"save_steps"}, "0 (end only)", "", "steps between checkpoints",
       &TrainConfig::save_interval, 0, at_least<0>},
      {"save_strategy",
       {},
       "steps",
       "",
       "`steps`: checkpoints every `save_interval` steps and at the end; `epoch`: at the end of every epoch and at "
       "the end; `no`: none (a stop signal still saves); final/ is written either way",
       &TrainConfig::checkpoint_saves, "steps", nullptr, {"steps", "epoch", "no"}},
      {"eval_strategy",
       {"evaluation_strategy"},
       "steps",
       "",
       "`steps`: evaluates every `eval_interval` steps and at the end; `epoch`: at the end of every epoch and at the "
       "end; `no`: never (HF's default is `no`; zerotrain's keeps its end-of-run evaluation)",
       &TrainConfig::evaluations, "steps", nullptr, {"steps", "epoch", "no"}},
      {"keep_last", {"save_total_limit"}, "2", "", "checkpoints kept (and the best one, with load_best_model_at_end)",
       &TrainConfig::keep_last, 2, at_least<0>},
      {"load_best_model_at_end",
       {},
       "false",
       "",
       "final/ is the saved checkpoint with the best validation loss (HF's checks: eval_strategy = save_strategy, "
       "save_steps a multiple of eval_steps)",
       &TrainConfig::load_best_model_at_end, false},
      {"metric_for_best_model", {}, "loss", "", "loss or eval_loss (the validation loss: the metric a run computes)",
       &RunConfig::metric_for_best_model, "loss", nullptr, {"loss", "eval_loss"}},
      {"greater_is_better", {}, "false", "", "true: a larger metric is better",
       &TrainConfig::greater_is_better, false},
      {"early_stopping_patience",
       {},
       "0 (off)",
       "",
       "HF's EarlyStoppingCallback: stop after this many evaluations without an improvement",
       &TrainConfig::early_stopping_patience, 0, check_early_stopping},
      {"early_stopping_threshold", {}, "0", "", "the improvement an evaluation must beat to reset the patience",
       &TrainConfig::early_stopping_threshold, 0.0, check_early_stopping},
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
       "(docs/checkpoints.md#output-directory)",
       &TrainConfig::output_dir, "out"},
      {"overwrite_output_dir",
       {},
       "false",
       "",
       "true (`--overwrite_output_dir`): a run without `--resume` replaces the run in output_dir (its checkpoints/, "
       "final/, metrics.jsonl)",
       &TrainConfig::overwrite_output_dir, false},
      {"stop_grace_seconds",
       {},
       "0 (none)",
       "",
       "seconds from the first stop signal to an immediate exit (128 + the signal) when the stop's save has not "
       "finished (docs/checkpoints.md#stop-signals)",
       &TrainConfig::stop_grace_seconds, 0, check_stop_grace},
      {"seed", {}, "1234", "", "",
       &TrainConfig::seed, 1234, not_negative},
      {"data_seed", {}, "seed", "", "the seed of the data order (training and validation batches) alone, as HF's",
       &TrainConfig::data_seed, -1, not_negative},
      {"steps_per_print", {"logging_steps", "log_interval"}, "10", "", "",
       &TrainConfig::steps_per_print, 10, at_least<1>},
      {"resume", {"resume_from_checkpoint"}, "\"\"", "", "\"\" \\| latest \\| auto \\| a checkpoint dir",
       &TrainConfig::resume, "", nullptr, {}, RunPath::No, AutoOk::Yes},
      {"device",
       {},
       "auto",
       "",
       "auto (cuda when a GPU is visible and the build has the CUDA backend, else cpu) \\| cpu \\| cuda",
       &RunConfig::device, "auto", nullptr, {"auto", "cpu", "cuda"}, RunPath::No, AutoOk::Yes},
      {"samples.prompts", {}, "—", "", "a string or a list, printed after training",
       &TrainConfig::sample_prompts, nullptr},
      {"samples.tokens", {}, "0", "", "tokens sampled per prompt (at most 2^20; samples are checked at start)",
       &TrainConfig::sample_tokens, 0, check_sample_tokens},
      {"samples.temperature", {}, "0.8", "", "in [0, 1e4] (0: greedy)",
       &TrainConfig::sample_temperature, 0.8, check_sample_temperature},
      {"samples.top_k", {}, "40", "", "0 (off) to 2^31-1",
       &TrainConfig::sample_top_k, 40, check_sample_top_k},
  };
}

// lora:, PEFT files, and HF Trainer's optimizer, schedule and precision keys.
std::vector<RunKey> lora_and_trainer_rows() {
  return {
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
       "a PEFT adapter_config.json giving the LoRA settings (`--peft FILE`); not with a `lora:` section",
       &RunConfig::peft, "", nullptr, {}, RunPath::Yes},
      {"adapter",
       {},
       "—",
       "",
       "a PEFT adapter folder (adapter_config.json + adapter_model.safetensors) the adapters start from (`--adapter "
       "DIR`); its config gives the LoRA settings",
       &RunConfig::adapter, "", nullptr, {}, RunPath::Yes},
      {"learning_rate", {}, "5e-5", "", "optimizer lr (HF default)",
       &RunConfig::learning_rate, 5e-5, not_negative},
      {"per_device_train_batch_size", {}, "8", "", "micro batch (at most 2^24)",
       &RunConfig::per_device_train_batch_size, 8, check_batch_factor},
      {"gradient_accumulation_steps", {}, "1", "", "at most 2^24",
       &RunConfig::gradient_accumulation_steps, 1, check_batch_factor},
      {"warmup_steps", {}, "0", "", "",
       &TrainConfig::warmup_steps, 0, at_least<0>},
      {"warmup_ratio", {}, "0", "", "fraction of total steps; not with warmup_steps",
       &TrainConfig::warmup_ratio, 0.0, check_warmup_ratio},
      {"lr_scheduler_type",
       {},
       "linear",
       "",
       "constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial, inverse_sqrt (HF's "
       "defaults for their arguments); reduce_lr_on_plateau, cosine_with_min_lr and warmup_stable_decay refused",
       &RunConfig::lr_scheduler_type, "linear", check_lr_scheduler_type,
       {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial", "inverse_sqrt"}},
      {"weight_decay", {}, "0", "", "",
       &RunConfig::weight_decay, 0.0, not_negative},
      {"max_grad_norm", {}, "1.0", "", "clipping (0 = off)",
       &RunConfig::max_grad_norm, 1.0, check_max_grad_norm},
      {"adam_beta1", {}, "0.9", "", "",
       &RunConfig::adam_beta1, 0.9, check_beta},
      {"adam_beta2", {}, "0.999", "", "",
       &RunConfig::adam_beta2, 0.999, check_beta},
      {"adam_epsilon", {}, "1e-8", "", "",
       &RunConfig::adam_epsilon, 1e-8, check_epsilon},
      {"optim", {}, "adamw", "", "adamw (adamw_torch, adamw_torch_fused, adamw_hf), adam, sgd, lion (lion_32bit)",
       &RunConfig::optim, "adamw", nullptr,
       {"adamw", "adamw_torch", "adamw_torch_fused", "adamw_hf", "adam", "sgd", "lion", "lion_32bit"}},
      {"bf16", {}, "false", "", "mixed precision (not with fp16)",
       &RunConfig::bf16, false},
      {"fp16", {}, "false", "", "mixed precision (not with bf16)",
       &RunConfig::fp16, false},
      {"master_weights",
       {},
       "true",
       "",
       "false: bf16 parameters and optimizer state, no f32 master copy (bf16 only; see below)",
       &RunConfig::master_weights, true},
      {"deepspeed", {}, "—", "", "ds_config path",
       &RunConfig::deepspeed, ""},
      {"accelerate_config", {}, "—", "", "Accelerate YAML path",
       &RunConfig::accelerate_config, ""},
  };
}

std::vector<RunKey> make_table() {
  std::vector<RunKey> rows = model_and_data_rows();
  for (auto part : {loop_rows(), lora_and_trainer_rows()}) rows.insert(rows.end(), part.begin(), part.end());
  return rows;
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
