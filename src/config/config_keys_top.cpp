// The ds_config top level: one row per key. The scalars are read from their rows
// (detail::read_key into DsTopLevel); a section or block is an Object/Any row whose value
// its own parser reads (ds_config.cpp, ds_config_zero.cpp, ds_config_scheduler.cpp), so
// that the known-key check, its did-you-mean and the doc table still come from here.
// What a row cannot say stays in ds_config.cpp: the batch rule, refusals that depend on a
// block's "enabled", the monitors' note.
#include "config/config_keys.h"

namespace zt::config {

namespace {

using T = DsTopLevel;

constexpr auto row = key_row<T>;

// A section or block: read by its own parser; the row names it and documents it.
TopKey block(std::string key, std::vector<std::string> aliases, std::string dflt_text, KeyStatus status,
             std::string doc) {
  return row(std::move(key), std::move(aliases), KeyType::Object, 0, std::move(dflt_text), kNoMinimum, AutoRule::None,
             status, std::monostate{}, std::move(doc));
}

std::vector<TopKey> make_table() {
  const auto B = KeyType::Bool, I = KeyType::Int, N = KeyType::Number;
  const auto R = KeyStatus::Resolved, A = KeyStatus::Accepted, X = KeyStatus::Refused;
  const auto none = AutoRule::None, run = AutoRule::FromRun;
  const std::string batch = "resolved (auto ok; see the batch rule)";
  std::vector<TopKey> t = {
      at_most(row("train_batch_size", {}, I, 0, "see batch rule", 1, run, R, &T::train_batch_size, batch),
              int64_t{1} << 36, "sequences per optimizer step"),
      at_most(row("train_micro_batch_size_per_gpu", {}, I, 0, "see batch rule", 1, run, R,
                  &T::train_micro_batch_size_per_gpu, batch),
              1 << 24, "sequences per micro batch"),
      at_most(row("gradient_accumulation_steps", {}, I, 0, "see batch rule", 1, run, R, &T::gradient_accumulation_steps,
                  batch),
              1 << 24, "micro batches per step"),
      row("gradient_clipping", {}, N, 1, "1.0 (0 = off)", 0, run, R, &T::gradient_clipping, "resolved (auto ok)"),
      row("steps_per_print", {}, I, 10, "10", 1, none, R, &T::steps_per_print,
          "resolved (a run config's explicit value wins)"),
      row("seed", {}, I, 1234, "1234", kNoMinimum, none, R, &T::seed, "resolved (a run config's explicit value wins)"),
      row("wall_clock_breakdown", {}, B, 0, "false", kNoMinimum, none, R, &T::wall_clock_breakdown,
          "resolved: `zerotrain train` prints `time (ms/step) \\| fwd \\| bwd \\| step \\| comm` after each log line "
          "(CPU: steady clock; GPU: CUDA events, one wait at the log step; comm = time blocked in the engine's "
          "collectives) and adds `time_ms` to metrics.jsonl; the Accelerator API warns (your loop times itself)"),
      row("memory_breakdown", {}, B, 0, "false", kNoMinimum, none, R, &T::memory_breakdown,
          "resolved: a memory line by category (parameters, gradients, optimizer state, engine buffers, activations "
          "and other at the peak, host RSS; on the GPU in use / peak / reserved) at the start and at each log line, "
          "`memory` in metrics.jsonl"),
      row("prescale_gradients", {}, B, 0, "false", kNoMinimum, none, A, &T::prescale_gradients,
          "accepted: gradients are averaged by scaling the loss by 1/world size (warning when true)"),
      row("gradient_predivide_factor", {}, N, 1, "1.0", 1e-30, none, A, &T::gradient_predivide_factor,
          "accepted: as above (warning when not 1)"),
      block("communication_data_type", {}, "null (the gradients' dtype)", R,
            "resolved: fp16 / bf16 / fp32, the dtype the ZeRO engine reduces gradients in (buckets converted before "
            "the all-reduce / reduce-scatter, results converted back or added into the f32 partition); 16-bit halves "
            "the reduction bytes of f32 gradients. One process reduces nothing: a warning, and no rounding"),
      block("data_types", {}, "null", A,
            "`grad_accum_dtype` accepted: gradients accumulate in their own dtype, stages 2-3 in f32 partitions "
            "(warning when set)"),
      row("dataloader_drop_last", {}, B, 0, "false", kNoMinimum, none, A, &T::dataloader_drop_last,
          "accepted: batches are always full, the loader wraps epochs (warning when true)"),
      row("zero_allow_untested_optimizer", {}, B, 0, "false", kNoMinimum, none, A, &T::zero_allow_untested_optimizer,
          "accepted: every supported optimizer works with every stage"),
      row("zero_force_ds_cpu_optimizer", {}, B, 1, "true", kNoMinimum, none, A, &T::zero_force_ds_cpu_optimizer,
          "accepted: every supported optimizer works with every stage"),
      block("checkpoint", {}, "Warn, false, false", A,
            "`tag_validation`, `load_universal`, `use_node_local_storage`, `parallel_write` accepted: zerotrain "
            "checkpoints load at any world size and stage without conversion (`use_node_local_storage: true` warns)"),
      row("dump_state", {}, B, 0, "false", kNoMinimum, none, A, &T::dump_state,
          "accepted (warning when true; `zerotrain config check` prints the resolved config)"),
      block("fp16", {}, "off", R, "a section: see [fp16](#fp16)"),
      block("bf16", {"bfloat16"}, "off", R,
            "a section: see [bf16](#bf16-alias-bfloat16-both-spellings-at-once-is-an-error)"),
      block("optimizer", {}, "AdamW", R, "a section: see [optimizer](#optimizer)"),
      block("scheduler", {}, "none", R, "a section: see [scheduler](#scheduler)"),
      block("zero_optimization", {}, "stage 0", R, "a section: see [zero_optimization](#zero_optimization)"),
      block("activation_checkpointing", {}, "off", R,
            "a section: see [activation_checkpointing](#activation_checkpointing)"),
      block("aio", {}, "see aio", R, "a section: see [aio](#aio-top-level-for-nvme-offload)"),
  };
  t.push_back(block("tensorboard", {}, "off", R,
                    "enabled: TensorBoard event files in output_path/job_name (DeepSpeed's defaults: "
                    "./DeepSpeedJobName) with DeepSpeed's tags (Train/Samples/train_loss, lr, loss_scale) against "
                    "samples; report_to tensorboard wins when both are set"));
  t.push_back(block("csv_monitor", {}, "off", R,
                    "enabled: DeepSpeed's CSV files in output_path/job_name (defaults ./DeepSpeedJobName), one per "
                    "tag (Train_Samples_train_loss.csv, _lr, _loss_scale), rows `step,<name>` against samples"));
  for (const char* monitor : {"wandb", "comet", "flops_profiler"})
    t.push_back(block(monitor, {}, "off", A, "accepted; a note says it has no effect (logs go to stdout)"));
  for (const char* refused :
       {"amp", "elasticity", "autotuning", "compression_training", "data_efficiency", "curriculum_learning"})
    t.push_back(block(refused, {}, "off", X, "refused when enabled"));
  TopKey sparse =
      row("sparse_gradients", {}, B, 0, "false", kNoMinimum, none, X, &T::sparse_gradients, "refused when true");
  sparse.refuse_above = 0;
  sparse.refused_what =
      "sparse gradients is not supported by zerotrain; remove the key (embeddings get dense "
      "gradients)";
  t.push_back(sparse);
  TopKey sp = row("sequence_parallel_size", {}, I, 1, "1", 1, none, X, &T::sequence_parallel_size, "refused when > 1");
  sp.refuse_above = 1;
  sp.refused_what = "sequence parallelism (Ulysses) is not supported by zerotrain; set it to 1";
  t.push_back(sp);
  t.push_back(block("tensor_parallel", {}, "—", X, "refused when `autotp_size` or `tp_size` > 1"));
  t.push_back(block("pipeline", {}, "—", X, "refused when non-empty"));
  return t;
}

}  // namespace

const std::vector<TopKey>& top_level_keys() {
  static const std::vector<TopKey> table = make_table();
  return table;
}

}  // namespace zt::config
