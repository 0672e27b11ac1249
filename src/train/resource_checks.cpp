#include "train/resource_checks.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "io/bounded_file.h"
#include "io/output_file.h"
#include "train/estimate.h"
#include "train/lora_setup.h"
#include "zero/engine.h"

namespace zt::train {
namespace {

// f32 state elements per parameter (moments; SGD without momentum keeps none).
int optimizer_moments(const zero::OptimizerSpec& o) {
  switch (o.type) {
    case zero::OptimizerType::AdamW:
    case zero::OptimizerType::Adam:
      return 2;
    case zero::OptimizerType::Lion:
      return 1;
    case zero::OptimizerType::SGD:
      return o.momentum > 0.0f ? 1 : 0;
  }
  return 2;
}

// Optimizer state bytes per parameter: the moments, and the f32 master of 16-bit
// parameters; without a master the state is in the parameters' dtype (engine.h,
// ModelStateBytes).
int optimizer_state_bytes(const config::TrainConfig& c) {
  const int param_bytes = c.precision == config::Precision::F32 ? 4 : 2;
  const bool master = c.precision != config::Precision::F32 && c.optimizer.master_weights == zero::MasterWeights::F32;
  const int state_bytes = master || c.precision == config::Precision::F32 ? 4 : param_bytes;
  return optimizer_moments(c.optimizer) * state_bytes + (master ? 4 : 0);
}

// Per rank: the bytes ZeRO-Offload puts in host memory, and those it takes off the GPU's
// model states.
struct OffloadHostBytes {
  double host = 0, off_gpu = 0;
};
OffloadHostBytes offload_host_bytes(const config::TrainConfig& c, const model::ModelConfig& mc, int stage,
                                    int world_size) {
  OffloadHostBytes b;
  if (c.zero.offload_optimizer.device == config::OffloadDevice::None) return b;
  const double n = mc.num_parameters_f64();
  const int param_bytes = c.precision == config::Precision::F32 ? 4 : 2;
  const int optimizer_bytes = optimizer_state_bytes(c);
  const double ratio = c.zero.offload_optimizer.ratio;
  const double owned = stage >= 1 ? n / world_size : n;  // this rank's parameter partition
  // What trains: every parameter, or a LoRA run's adapters (the base has no optimizer state,
  // no gradients and no updated copy to stage).
  double trainable = n;
  if (c.lora) {
    try {
      trainable = static_cast<double>(lora_parameter_count(mc, model::lora_model_options(*c.lora, mc, c.lora_source)));
    } catch (const Error&) {
    }
  }
  const double owned_t = stage >= 1 ? trainable / world_size : trainable;  // elements this rank's optimizer updates
  const int grad_part_bytes = stage >= 2 ? 4 : param_bytes;
  const bool params_home = stage >= 3 && config::offloads_params(c.zero);
  // The largest unit's slice (the embedding's, or a block's): what one swap buffer holds.
  const double embedding = static_cast<double>(mc.padded_vocab_size()) * static_cast<double>(mc.hidden_size);
  const double block = (n - embedding * (mc.tie_word_embeddings ? 1 : 2)) / static_cast<double>(mc.num_layers);
  const double unit = std::max(embedding, block) / (stage >= 1 ? world_size : 1);
  // The 16-bit parameters' staging, or offload_param's host home in its place; with
  // offload_param nvme only max_in_cpu elements of it and the swap buffers of the rest
  // (the drive's room is reserved when the store is made: a full drive is an error there).
  double params_host = params_home ? owned * param_bytes : ratio * owned_t * param_bytes;
  if (params_home && c.zero.offload_param.device == config::OffloadDevice::NVMe) {
    const double resident = std::min(owned, static_cast<double>(c.zero.offload_param.max_in_cpu));
    params_host =
        resident * param_bytes + (owned > resident ? c.zero.offload_param.buffer_count * unit * param_bytes : 0);
  }
  b.host = ratio * owned_t * (optimizer_bytes + grad_part_bytes) + params_host;
  b.off_gpu = ratio * owned_t * optimizer_bytes + (params_home ? owned * param_bytes : 0);
  if (c.zero.offload_optimizer.device == config::OffloadDevice::NVMe) {
    // The state is on the drive; the host holds buffer_count swap buffers of the largest
    // piece: a unit's slice, at most sub_group_size.
    const double piece = std::min(unit, static_cast<double>(c.zero.sub_group_size));
    b.host = ratio * owned_t * grad_part_bytes + params_host +
             c.zero.offload_optimizer.buffer_count * piece * optimizer_bytes;
  }
  return b;
}

}  // namespace

void check_offload_fits_host(const config::TrainConfig& c, const model::ModelConfig& mc, int stage, int world_size,
                             int ranks_on_host) {
  const double host = offload_host_bytes(c, mc, stage, world_size).host;
  if (host <= 0) return;
  char count[32];
  std::snprintf(count, sizeof count, "%.4g", mc.num_parameters_f64());
  const bool nvme = c.zero.offload_optimizer.device == config::OffloadDevice::NVMe;
  const bool params = stage >= 3 && config::offloads_params(c.zero);
  const bool param_nvme = params && c.zero.offload_param.device == config::OffloadDevice::NVMe;
  const std::string what =
      c.source + ": the offloaded optimizer state" +
      (nvme ? "'s NVMe swap buffers (" + std::to_string(c.zero.offload_optimizer.buffer_count) +
                  ") and its staging buffers"
            : std::string(" and its staging buffers")) +
      (param_nvme ? ", the parameters kept in host memory (offload_param.max_in_cpu) and their NVMe swap buffers"
       : params   ? ", the offloaded parameters"
                  : "") +
      " (" + count + " parameters, offload_optimizer.ratio " +
      std::to_string(c.zero.offload_optimizer.ratio).substr(0, 4) + ") per rank";
  std::string fix =
      nvme ? "lower zero_optimization.offload_optimizer.buffer_count or zero_optimization.sub_group_size, spread the "
             "ranks over more machines, or use a machine with more memory"
           : "lower zero_optimization.offload_optimizer.ratio (the rest of the state stays on the GPU), put it on "
             "NVMe (offload_optimizer.device nvme), spread the ranks over more machines, or use a machine with more "
             "memory";
  if (param_nvme) fix = "lower zero_optimization.offload_param.max_in_cpu or offload_param.buffer_count, or " + fix;
  if (ranks_on_host <= 1)
    check_fits_host_memory(host, what, fix);
  else
    check_fits_host_memory(host * ranks_on_host, what + " x " + std::to_string(ranks_on_host) + " ranks on this host",
                           fix);
}

void check_model_state_fits(const config::TrainConfig& c, const model::ModelConfig& mc, int stage, int world_size,
                            int ranks_on_host) {
  const double n = mc.num_parameters_f64();
  const int param_bytes = c.precision == config::Precision::F32 ? 4 : 2;
  const int optimizer_bytes = optimizer_state_bytes(c);
  // zero_formula_bytes (the engine's own accounting) in int64 where it cannot overflow;
  // past 2^48 parameters no machine holds the model anyway.
  const int bytes_per_param = param_bytes + 4 + optimizer_bytes;
  double total = n < 281474976710656.0
                     ? static_cast<double>(zero::zero_formula_bytes(stage, static_cast<int64_t>(n), world_size,
                                                                    param_bytes, param_bytes, 4, optimizer_bytes))
                     : n * bytes_per_param / world_size;
  if (c.lora) {
    // LoRA: the frozen base holds its 16-bit parameters only; gradients, master and
    // moments are the adapters' (the targets were resolved by the config; a bad one is
    // reported by the model setup, so none is counted here).
    double adapters = 0;
    try {
      adapters = static_cast<double>(lora_parameter_count(mc, model::lora_model_options(*c.lora, mc, c.lora_source)));
    } catch (const Error&) {
    }
    const double params = stage >= 3 ? n * param_bytes / world_size : n * param_bytes;
    const double grads = stage >= 2 ? adapters * 4 / world_size : adapters * param_bytes;
    const double optimizer = stage >= 1 ? adapters * optimizer_bytes / world_size : adapters * optimizer_bytes;
    total = params + grads + optimizer;
  }
  char count[32];
  std::snprintf(count, sizeof count, "%.4g", n);
  std::string what = "the model's parameters, gradients and optimizer state (" + std::string(count) +
                     " parameters, ZeRO stage " + std::to_string(stage) + " over " + std::to_string(world_size) +
                     " rank(s)) per rank";
  // ZeRO-Offload: `ratio` of this rank's optimizer state moves to host memory, with a
  // staging copy of its gradient partition and 16-bit parameters (zero/offload_optimizer.h;
  // with offload_param the parameters' host home replaces their staging).
  const OffloadHostBytes off = offload_host_bytes(c, mc, stage, world_size);
  total -= off.off_gpu;
  if (off.host > 0 && c.device == "cuda") {
    check_offload_fits_host(c, mc, stage, world_size, ranks_on_host);
    what += ", the offloaded state not counted,";
  }
  if (c.device == "cuda") {
    // Free memory when the driver says (other processes on the GPU count), else the total.
    const size_t free = cuda::free_device_memory();
    const double device = static_cast<double>(free > 0 ? free : cuda::device_info(cuda::current_device()).total_memory);
    if (total > device)
      ZT_THROW_INPUT(c.source, ": ", what, " need ", bytes_str(total), " of GPU memory, but only ", bytes_str(device),
                     free > 0 ? " is free" : " is the GPU's total",
                     ": use ZeRO stage 3 over more GPUs, bf16, or a smaller model");
    // With the step's activations (zerotrain estimate's count, within a few percent of the
    // measured peaks): a warning, not a refusal, since an estimate may be a little high.
    const int64_t T =
        c.data.seq_len > 0 ? std::min(c.data.seq_len, mc.max_position_embeddings) : mc.max_position_embeddings;
    const int64_t act =
        estimate_activation_bytes(mc, c.precision, c.model.activation_checkpointing, c.micro_batch_per_gpu, T);
    if (total + static_cast<double>(act) > device)
      ZT_WARN("this run needs about ", bytes_str(total + static_cast<double>(act)), " of GPU memory (model states ",
              bytes_str(total), " + activations ", bytes_str(static_cast<double>(act)), " at micro-batch ",
              c.micro_batch_per_gpu, " x ", T, " tokens), more than the ", bytes_str(device),
              free > 0 ? " free" : " the GPU has",
              ": expect an out-of-memory error; lower the micro-batch (raise gradient_accumulation_steps to keep the "
              "batch), turn on gradient_checkpointing, or use a shorter seq_len");
    return;
  }
  total += off.host;  // on the CPU backend everything is host memory
  if (ranks_on_host <= 1) {
    check_fits_host_memory(total, c.source + ": " + what);
    return;
  }
  check_fits_host_memory(total * ranks_on_host,
                         c.source + ": " + what + " x " + std::to_string(ranks_on_host) + " ranks on this host");
}

void check_global_batch_fits_data(const config::TrainConfig& c, int64_t windows, int64_t seq_len) {
  const int64_t B = c.micro_batch_per_gpu, gas = c.grad_accum_steps, W = c.world_size;
  // Compared factor by factor: the product of absurd values would overflow.
  const bool too_big = gas > windows || B * W > windows || B * W * gas > windows;
  if (!too_big) return;
  ZT_THROW_INPUT(c.source, ": the global batch train_batch_size = train_micro_batch_size_per_gpu ", B,
                 " x gradient_accumulation_steps ", gas, " x world size ", W, " is more than the training data's ",
                 windows, " windows of ", seq_len,
                 " tokens per epoch, so one optimizer step would repeat the data: lower gradient_accumulation_steps "
                 "or the batch size, or use more data");
}

OutputRoom output_room(const CheckpointPlan& p, double final_bytes, double checkpoint_bytes) {
  OutputRoom r;
  if (p.saves > 0) {
    // Before save i the folder holds min(on_disk + i - 1, kept) checkpoints (the first
    // save finds on_disk); during it one more. Relative to now that is at most
    // min(saves, kept + 1 - on_disk), and at least the one being written.
    const int64_t kept = p.keep_last > 0 ? p.keep_last + (p.keeps_best ? 1 : 0) : 0;
    if (kept == 0) {
      r.checkpoints_at_save = p.saves;
      r.checkpoints_with_final = p.saves;
    } else {
      r.checkpoints_at_save = std::max<int64_t>(1, std::min(p.saves, kept + 1 - p.on_disk));
      r.checkpoints_with_final = std::max<int64_t>(0, std::min(p.on_disk + p.saves, kept) - p.on_disk);
    }
  }
  r.bytes = std::max(static_cast<double>(r.checkpoints_at_save) * checkpoint_bytes,
                     static_cast<double>(r.checkpoints_with_final) * checkpoint_bytes + final_bytes);
  return r;
}

void check_output_drive_room(const config::TrainConfig& c, const CheckpointPlan& plan, double final_bytes,
                             double checkpoint_bytes, double free_bytes) {
  const OutputRoom room = output_room(plan, final_bytes, checkpoint_bytes);
  if (free_bytes >= room.bytes) return;
  const bool saves = plan.saves > 0;
  std::string why;
  if (saves) {
    why = str(" and checkpoints of ", bytes_str(checkpoint_bytes), " each, ", room.checkpoints_at_save,
              " at once while one is saved");
    if (plan.keep_last > 0)
      why += str(" (keep_last ", plan.keep_last, plan.keeps_best ? " + the best one" : "",
                 " + the one being written: the oldest is removed only after the new one is complete",
                 plan.on_disk > 0 ? str("; ", plan.on_disk, " already there") : std::string(), ")");
    else
      why += " (keep_last 0 keeps every one)";
    why += str(", ", room.checkpoints_with_final, " beside final/ at the end");
  }
  ZT_THROW_INPUT(
      "output_dir '", c.output_dir, "': its drive has ", bytes_str(free_bytes),
      " free (after the NVMe swap files, if on it, took theirs), but this run needs ", bytes_str(room.bytes),
      ": final/ needs ", bytes_str(final_bytes), why, ": free space there or point output_dir at another drive",
      saves ? " (or keep fewer checkpoints: keep_last, save_strategy \"no\" saves only at a stop signal)" : "");
}

void check_outputs_writable(const config::TrainConfig& c, const std::filesystem::path& output_dir) {
  io::probe_writable_dir(output_dir.string(), "output_dir (the lock, metrics.jsonl and final/)");
  io::probe_writable_dir((output_dir / "checkpoints").string(), "the run's checkpoints");
  if (!c.tensorboard_dir.empty()) io::probe_writable_dir(c.tensorboard_dir, "report_to tensorboard (logging_dir)");
  if (!c.csv_monitor_dir.empty()) io::probe_writable_dir(c.csv_monitor_dir, "csv_monitor (output_path)");
  // `latest` is replaced at every save, never written through a link or into a device: a
  // planted link or a FIFO there would fail the first save, after the training time.
  const std::filesystem::path latest = output_dir / "checkpoints" / "latest";
  struct stat st {};
  if (::lstat(latest.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::string kind = io::file_kind_name(st.st_mode);
    if (S_ISLNK(st.st_mode)) {
      struct stat target {};
      kind = ::stat(latest.c_str(), &target) == 0 ? "a symbolic link to " + io::file_kind_name(target.st_mode)
                                                   : "a symbolic link to nothing";
    }
    ZT_THROW_INPUT(latest.string(), ": not a regular file (it is ", kind,
                   "); every save replaces the checkpoint folder's latest file, and zerotrain never writes through a "
                   "link or into a device: remove it before the run starts");
  }
}

}  // namespace zt::train
