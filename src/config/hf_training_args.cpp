#include "config/hf_training_args.h"

#include "core/error.h"

namespace zt::config {

using nlohmann::json;

namespace {

std::vector<HfTrainingArg> make_table() {
  constexpr HfArgEffect N = HfArgEffect::None;
  constexpr HfArgEffect R = HfArgEffect::RefusedUnlessDefault;
  const json null;
  const json empty_list = json::array();
  return {
      // Optimizer and schedule.
      {"lr_scheduler_kwargs", null, R, "scheduler arguments are run keys here (warmup_steps, num_cycles are not read); remove it"},
      {"optim_args", null, R, "optimizer arguments are ds_config optimizer.params here; move them there"},
      {"optim_target_modules", null, R, "GaLore/APOLLO are not implemented; remove it"},
      {"adafactor", false, R, "Adafactor is not implemented; use optim adamw_torch, sgd or lion"},
      {"label_smoothing_factor", 0.0, R, "label smoothing is not implemented; remove it (0)"},
      {"neftune_noise_alpha", null, R, "NEFTune embedding noise is not implemented; remove it"},
      {"average_tokens_across_devices", true, N, "the loss is the mean over each micro-batch's tokens, averaged over ranks"},
      {"auto_find_batch_size", false, R, "set per_device_train_batch_size (`zerotrain estimate` says what fits)"},
      // Precision and kernels.
      {"bf16_full_eval", false, N, "evaluation runs in the training precision"},
      {"fp16_full_eval", false, N, "evaluation runs in the training precision"},
      {"fp16_opt_level", "O1", N, "Apex is not used: fp16 is the model's 16-bit compute with dynamic loss scaling"},
      {"fp16_backend", "auto", N, "Apex is not used"},
      {"half_precision_backend", "auto", N, "Apex is not used"},
      {"gradient_checkpointing_kwargs", null, N, "checkpointing is always selective and non-reentrant"},
      {"torch_compile", false, N, "the kernels are native; nothing to compile"},
      {"torch_compile_backend", null, N, "the kernels are native; nothing to compile"},
      {"torch_compile_mode", null, N, "the kernels are native; nothing to compile"},
      {"torchdynamo", null, N, "the kernels are native; nothing to compile"},
      {"use_liger_kernel", false, N, "the norms, activations and LM head + cross-entropy are fused already"},
      {"liger_kernel_config", null, N, "the norms, activations and LM head + cross-entropy are fused already"},
      {"use_cache", false, N, "training keeps no KV cache"},
      {"torch_empty_cache_steps", null, N, "the caching allocator is zerotrain's own"},
      {"jit_mode_eval", false, N, "no TorchScript"},
      {"use_ipex", false, N, "no Intel extension"},
      {"full_determinism", false, N, "runs are deterministic already (same seed, same world size: same bits)"},
      // Logging and trackers.
      {"logging_strategy", "steps", N, "the step line follows logging_steps (steps_per_print)"},
      {"logging_first_step", false, N, "the step line follows logging_steps (steps_per_print)"},
      {"log_on_each_node", true, N, "rank 0 logs"},
      {"logging_nan_inf_filter", true, N, "a non-finite loss is logged as it is (fp16 skips are counted on the line)"},
      {"include_num_input_tokens_seen", "no", N, "tokens/s is on every step line"},
      {"include_tokens_per_second", false, N, "tokens/s is on every step line"},
      {"log_level", "passive", N, "zerotrain prints info, warnings and errors"},
      {"log_level_replica", "warning", N, "zerotrain prints info, warnings and errors"},
      {"disable_tqdm", null, N, "progress is the step line"},
      {"run_name", null, N, "trackers other than TensorBoard are not written"},
      {"project", "huggingface", N, "Trackio is not written"},
      {"trackio_space_id", "trackio", N, "Trackio is not written"},
      {"skip_memory_metrics", true, N, "memory is on every step line"},
      {"debug", "", N, "no debug modes (wall_clock_breakdown and memory_breakdown are the ds_config's)"},
      // Evaluation.
      {"eval_delay", 0, N, "evaluations follow eval_steps from the start"},
      {"prediction_loss_only", false, N, "evaluation computes the loss only"},
      {"eval_on_start", false, N, "the first evaluation is at eval_steps"},
      {"eval_do_concat_batches", true, N, "evaluation computes the loss only"},
      {"eval_use_gather_object", false, N, "evaluation computes the loss only"},
      {"eval_accumulation_steps", null, N, "evaluation computes the loss only"},
      {"include_for_metrics", empty_list, N, "evaluation computes the loss only"},
      {"include_inputs_for_metrics", false, N, "evaluation computes the loss only"},
      {"batch_eval_metrics", false, N, "evaluation computes the loss only"},
      // Saving, the hub, resuming.
      {"save_only_model", false, N, "checkpoints always hold the whole training state (resume needs it)"},
      {"save_safetensors", true, N, "weights are always written as safetensors"},
      {"save_on_each_node", false, N, "rank 0 writes the model; every rank its own checkpoint shards"},
      {"enable_jit_checkpoint", false, N, "SIGTERM/SIGINT already end the step and save a checkpoint"},
      {"push_to_hub", false, R, "nothing is uploaded; upload output_dir/final yourself (huggingface-cli upload)"},
      {"hub_token", null, N, "nothing is uploaded"},
      {"hub_private_repo", null, N, "nothing is uploaded"},
      {"hub_model_id", null, N, "nothing is uploaded"},
      {"hub_strategy", "every_save", N, "nothing is uploaded"},
      {"hub_always_push", false, N, "nothing is uploaded"},
      {"hub_revision", null, N, "nothing is uploaded"},
      {"ignore_data_skip", false, R, "a resume continues the data exactly where it stopped; remove it"},
      {"restore_callback_states_from_checkpoint", false, N, "there are no callbacks; early stopping's state resumes"},
      // Hardware and processes.
      {"use_cpu", false, R, "set device: cpu"},
      {"no_cuda", false, R, "set device: cpu"},
      {"use_mps_device", false, R, "no Apple MPS backend; device: cpu or cuda"},
      {"local_rank", -1, N, "ranks come from the launcher's environment"},
      {"accelerator_config", null, N, "give an Accelerate YAML with --config_file"},
      {"parallelism_config", null, R, "tensor and context parallelism are not configured this way; remove it"},
      {"dispatch_batches", null, N, "every rank reads its own share of the data"},
      {"split_batches", false, R, "per_device_train_batch_size is per rank here; remove it"},
      {"tpu_num_cores", null, N, "no TPUs"},
      {"tpu_metrics_debug", false, N, "no TPUs"},
      {"past_index", -1, N, "no models with mems"},
      {"ray_scope", "last", N, "no Ray hyperparameter search"},
      // Data loading.
      {"dataloader_drop_last", false, N, "batches are whole windows of the token stream"},
      {"dataloader_pin_memory", true, N, "batches are read from memory-mapped token shards"},
      {"dataloader_persistent_workers", false, N, "batches are read from memory-mapped token shards"},
      {"dataloader_prefetch_factor", null, N, "batches are read from memory-mapped token shards"},
      {"remove_unused_columns", true, N, "only the text field (data.jsonl_field) is read"},
      {"label_names", null, N, "labels are the next tokens"},
      {"train_sampling_strategy", "random", R, "windows are shuffled each epoch (data_seed); remove it"},
      {"group_by_length", false, R, "windows are fixed-length; remove it"},
      {"length_column_name", "length", N, "windows are fixed-length"},
      // DDP and FSDP.
      {"ddp_find_unused_parameters", null, N, "gradients are reduced by the ZeRO engine, not DDP"},
      {"ddp_bucket_cap_mb", null, N, "bucket sizes are the ds_config's zero_optimization.reduce_bucket_size"},
      {"ddp_broadcast_buffers", null, N, "the model has no buffers to broadcast"},
      {"ddp_backend", null, N, "NCCL on GPUs, MPI on CPUs, chosen by the device"},
      {"ddp_timeout", 1800, N, "collectives time out after ZT_COLLECTIVE_TIMEOUT_S (300)"},
      {"fsdp", null, R, "FSDP is ZeRO stage 3 here: set zero_optimization.stage 3 in the ds_config"},
      {"fsdp_config", null, R, "FSDP is ZeRO stage 3 here: set zero_optimization.stage 3 in the ds_config"},
      {"fsdp_min_num_params", 0, N, "ZeRO stage 3 partitions every unit"},
      {"fsdp_transformer_layer_cls_to_wrap", null, N, "ZeRO stage 3 partitions every unit"},
      {"sharded_ddp", null, R, "use a ds_config's zero_optimization.stage"},
      // Script flags the Trainer itself never reads.
      {"do_train", false, N, "the command says what to do (zerotrain train)"},
      {"do_eval", false, N, "evaluation follows eval_strategy"},
      {"do_predict", false, N, "the command says what to do (zerotrain eval)"},
  };
}

// HF's default counts as absent; so does YAML's empty value for a field whose default is None.
bool at_default(const json& value, const json& hf_default) {
  if (value == hf_default) return true;
  if (hf_default.is_null()) return value.is_null() || (value.is_string() && value.get<std::string>().empty()) ||
                                   (value.is_array() && value.empty()) || (value.is_object() && value.empty());
  if (hf_default.is_number() && value.is_number()) return value.get<double>() == hf_default.get<double>();
  return false;
}

}  // namespace

const std::vector<HfTrainingArg>& hf_training_args() {
  static const std::vector<HfTrainingArg> table = make_table();
  return table;
}

void take_hf_training_args(json& doc, const Where& top, std::vector<std::string>& warnings) {
  if (!doc.is_object()) return;
  for (const HfTrainingArg& a : hf_training_args()) {
    const auto it = doc.find(a.name);
    if (it == doc.end()) continue;
    const json value = *it;
    doc.erase(it);
    if (at_default(value, a.hf_default)) continue;
    if (a.effect == HfArgEffect::RefusedUnlessDefault)
      ZT_THROW_INPUT(top.key(a.name).str(), " = ", value.dump(), ": not supported by zerotrain: ", a.why);
    warnings.push_back(top.key(a.name).str() + " = " + value.dump() + ": accepted, no effect here (" + a.why + ")");
  }
}

std::string hf_training_args_markdown() {
  std::string out = "| TrainingArguments field | HF default | here |\n|---|---|---|\n";
  for (const HfTrainingArg& a : hf_training_args()) {
    const std::string def = a.hf_default.is_null() ? "None" : a.hf_default.dump();
    out += "| `" + a.name + "` | " + def + " | " +
           (a.effect == HfArgEffect::None ? "no effect (a warning when set): " : "refused unless at the default: ") +
           a.why + " |\n";
  }
  return out;
}

}  // namespace zt::config
