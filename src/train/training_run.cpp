#include "train/training_run.h"

#include <algorithm>
#include <exception>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <optional>

#include <nlohmann/json.hpp>

#include "backend/cuda_api.h"
#include "backend/cpu/optimizer_isa.h"
#include "core/env_vars.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_info.h"
#include "core/parallel.h"
#include "comm/env.h"
#include "comm/world.h"
#include "model/config.h"
#include "io/direct_file.h"
#include "io/staging_dir.h"
#include "model/hf_check.h"
#include "model/hf_dir.h"
#include "model/lora_config.h"
#include "checkpoint/checkpoint.h"
#include "config/inert_keys.h"
#include "train/rank_binding.h"
#include "train/resource_checks.h"
#include "config/config_paths.h"
#include "config/run_config.h"
#include "train/startup_clock.h"
#include "zero/offload_optimizer.h"

namespace zt::train {

namespace {

// SFT shards (a loss mask and samples): each sample its own padded window, or packed.
io::SampleWindows sample_windows(const config::TrainConfig& c) {
  return c.data.packing ? io::SampleWindows::Packed : io::SampleWindows::PaddedPerSample;
}

// The one line that says how SFT samples become windows (nothing for plain data).
void log_sample_windows(const io::BatchLoader& loader, const config::TrainConfig& c, int64_t T, bool main_rank) {
  if (loader.samples() == 0 || !main_rank) return;
  if (c.data.packing)
    ZT_INFO("SFT data: ", loader.samples(), " samples packed into ", loader.windows_per_epoch(), " windows of ",
            T + 1, " tokens (data.packing: true); attention stays inside each sample and positions restart "
            "at each sample start, as HF's packing with position_ids (TRL's padding_free); the loss counts "
            "response tokens only");
  else
    ZT_INFO("SFT data: ", loader.samples(), " samples, each its own window of up to ", T + 1,
            " tokens, padded (data.packing: false); ", loader.truncated_samples(),
            " longer sample(s) cut at that length; the loss counts response tokens only");
}

// The validation batch (TrainingRun::val_batch), settled before training so that a run
// does not train for hours and then fail at its first evaluation. Validation data shorter
// than one batch is evaluated as one batch of the windows it has (HF evaluates a short eval
// set too); data that makes no window at all is an error where the run needs a validation
// loss (data.validation given, load_best_model_at_end, early stopping) and otherwise a
// warning: the default validation_fraction split of a small data set is no reason to stop.
int64_t settle_validation_batch(const config::TrainConfig& c, const std::vector<std::string>& val_shards,
                                int64_t micro_batch, int64_t T, bool main_rank) {
  const bool needed = c.load_best_model_at_end || c.early_stopping_patience > 0;
  if (c.evaluations == config::Evaluations::None) return 0;
  if (val_shards.empty()) {
    if (needed)
      ZT_THROW_INPUT(c.source, ": ", c.load_best_model_at_end ? "load_best_model_at_end" : "early_stopping_patience",
                     " needs a validation loss, and there is no validation data: give data.validation or a "
                     "data.validation_fraction that selects some documents");
    return 0;
  }
  const int64_t wanted = c.eval_batch_size > 0 ? c.eval_batch_size : micro_batch;
  const int64_t windows = io::count_windows(val_shards, T, sample_windows(c));
  if (windows == 0) {
    const std::string what = str(val_shards.front(), ": the validation data makes no window of ", T + 1, " tokens");
    const char* fix = "; use more validation data or a shorter data.seq_len (or eval_strategy: no)";
    if (!c.data.validation.empty())  // name what the user gave, not the shard made from it
      ZT_THROW_INPUT(c.source, ": data.validation ", c.data.validation.front(),
                     (c.data.validation.size() > 1 ? str(" (and ", c.data.validation.size() - 1, " more)") : ""),
                     " makes no window of ", T + 1, " tokens", fix);
    if (needed) ZT_THROW_INPUT(what, fix);
    if (main_rank)
      ZT_WARN(what, " (the data.validation_fraction ", c.data.validation_fraction,
              " split): no validation loss this run; give data.validation or a larger data.validation_fraction");
    return 0;
  }
  if (windows < wanted && main_rank)
    ZT_INFO("validation: ", windows, " windows of ", T + 1, " tokens, fewer than a batch of ", wanted,
            ": evaluated as one batch of ", windows);
  return std::min(wanted, windows);
}

}  // namespace
namespace fs = std::filesystem;

namespace {

std::unique_ptr<LrSchedule> make_schedule(const config::TrainConfig& c, int64_t total_steps) {
  if (c.scheduler.is_object() && !c.scheduler.empty())
    return make_deepspeed_schedule(c.scheduler, c.optimizer.lr, c.source, ScheduleRun{total_steps, c.warmup_steps});
  return make_hf_schedule(c.hf_scheduler.empty() ? "constant" : c.hf_scheduler, c.optimizer.lr, c.warmup_steps,
                          total_steps);
}

// The ds_config's aio section as the swap files' I/O options (NVMe offload of the
// optimizer state and of the parameters).
io::AioOptions aio_options(const config::TrainConfig& c) {
  io::AioOptions a;
  a.block_size = static_cast<size_t>(c.aio.block_size);
  a.queue_depth = c.aio.queue_depth;
  a.thread_count = c.aio.intra_op_parallelism;
  a.single_submit = c.aio.single_submit;
  a.overlap_events = c.aio.overlap_events;
  return a;
}

// The config's own ZeroOptions (TrainConfig::zero is one); only the stage may be lowered
// to what the world size allows.
zero::ZeroOptions zero_options(const config::TrainConfig& c, int stage) {
  zero::ZeroOptions o = c.zero;
  o.stage = stage;
  if (config::offloads_params(c.zero)) {
    const zero::OffloadParamOptions& param = c.zero.offload_param;
    o.param_home = param.pin_memory ? zero::ParamHome::PinnedHost : zero::ParamHome::PageableHost;
    if (param.device == config::OffloadDevice::NVMe) o.param_nvme = zero::ParamNvme{param, aio_options(c)};
  }
  return o;
}

// Where stage 3's offloaded parameter slices live (the start-up log).
void log_param_store(const config::TrainConfig& c, const zero::ParamStore& store) {
  const zero::ParamStoreLayout& l = store.layout();
  const auto elements = [](int64_t n) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", static_cast<double>(n));
    return std::string(b);
  };
  std::string where = str(l.resident_units, " of ", l.units, " units (", elements(l.resident_elements),
                          " elements) in ", bytes_str(static_cast<double>(l.resident_bytes)), " of ",
                          l.pinned ? "page-locked" : "pageable", " host memory");
  if (!l.swap_file.empty())
    where += str(", ", l.units - l.resident_units, " (", elements(l.swapped_elements), " elements, ",
                 bytes_str(static_cast<double>(l.swap_file_bytes)), ") on NVMe in ", l.swap_file, " through ",
                 l.swap_buffers, " swap buffers (", bytes_str(static_cast<double>(l.swap_buffer_bytes)), "; ",
                 io::io_engine_name(store.io_engine()), ")");
  else if (c.zero.offload_param.device == config::OffloadDevice::NVMe)
    where += str(" (offload_param.max_in_cpu ", elements(c.zero.offload_param.max_in_cpu),
                 " holds them all: nothing is swapped)");
  ZT_INFO("offload_param ", c.zero.offload_param.device == config::OffloadDevice::NVMe ? "nvme" : "cpu", ": this rank's 16-bit parameter slices: ",
          where);
}

// Rank 0 locks output_dir and checks what a previous run left there (one owner: on a
// shared file system every rank names the same directory); the others learn the outcome
// from one collective, so a refused directory ends every rank with exit 2 instead of
// leaving them waiting in setup's barrier.
void claim_output_dir_on_rank0(TrainingRun& run) {
  const config::TrainConfig& c = run.config;
  const OutputDirUse use = !c.resume.empty()                                   ? OutputDirUse::Resume
                           : c.overwrite_output_dir == config::OutputDirOverwrite::Yes ? OutputDirUse::Overwrite
                                                                               : OutputDirUse::Fresh;
  std::exception_ptr refused;
  if (run.rank() == 0) {
    try {
      run.output_lock = claim_output_dir(run.output_dir, use);
      check_outputs_writable(c, run.output_dir);
    } catch (...) {
      refused = std::current_exception();
    }
  }
  const bool any_refused = comm::any_rank(run.world_comm(), refused != nullptr);
  if (refused) std::rethrow_exception(refused);
  if (any_refused) ZT_THROW_INPUT("output_dir '", c.output_dir, "': rank 0 refused it (its error says why)");
  if (run.rank() != 0) {
    // Ranks on other machines (a local output_dir) need the directory too.
    std::error_code ec;
    fs::create_directories(run.output_dir, ec);
    if (ec) ZT_THROW_INPUT("cannot create output_dir '", c.output_dir, "': ", ec.message());
  }
}

// The optimizer over the engine's partitions: on the device, or with offload_optimizer
// {device: cpu} its state and step on the host (zero/offload_optimizer.h), the engine
// streaming each unit's gradients to it.
std::unique_ptr<zero::Optimizer> make_run_optimizer(TrainingRun& run) {
  const config::TrainConfig& c = run.config;
  model::ParameterRegistry& registry = run.model().registry();
  if (c.zero.offload_optimizer.device == config::OffloadDevice::None)
    return zero::make_optimizer(registry, c.optimizer, run.engine->partition_fn());
  const zero::OffloadOptimizerOptions& off = c.zero.offload_optimizer;
  zero::OffloadOptions oo;
  oo.ratio = off.ratio;
  oo.pinning = off.pin_memory ? zero::Pinning::Pinned : zero::Pinning::Pageable;
  if (off.device == config::OffloadDevice::NVMe) {
    // The dict as written, and where and how this rank swaps.
    oo.nvme = zero::NvmeStoreOptions{off, "optimizer", run.rank(), c.zero.sub_group_size, aio_options(c)};
  }
  auto offload = std::make_unique<zero::OffloadedOptimizer>(registry, c.optimizer, run.engine->partition_fn(), oo);
  run.engine->set_offload(offload.get());
  const zero::OffloadLayout& l = offload->layout();
  const double host_share = static_cast<double>(l.host_elements) / static_cast<double>(std::max<int64_t>(1, l.elements));
  char share[16];
  std::snprintf(share, sizeof share, "%.1f%%", 100.0 * host_share);
  ZT_INFO("ZeRO-Offload: the optimizer state of ", l.host_units, " of ", l.units, " units (", share,
          " of the elements; offload_optimizer.ratio ", c.zero.offload_optimizer.ratio,
          ") lives ",
          l.swap_file.empty()
              ? std::string("in host memory, ")
              : str("on NVMe in ", l.swap_file, " (", bytes_str(static_cast<double>(l.swap_buffer_bytes)), " of ",
                    c.zero.offload_optimizer.buffer_count, " swap buffers in memory; ",
                    io::io_engine_name(offload->nvme_store()->io_engine()),
                    c.zero.offload_optimizer.pipeline_read ? ", pipelined reads" : "",
                    c.zero.offload_optimizer.pipeline_write ? ", pipelined writes" : "", "), "),
          bytes_str(static_cast<double>(l.host_state_bytes)), " + ",
          bytes_str(static_cast<double>(l.staging_bytes)), " of ", l.pinned ? "page-locked" : "pageable",
          l.params_in_place ? " gradient staging (offload_param: the 16-bit partitions are updated in place where they live)"
                            : " gradient and parameter staging",
          "; stepped on ", num_threads(), " host threads (", cpu::cpu_optimizer_isa(), ")",
          l.device_state_bytes > 0
              ? str("; ", bytes_str(static_cast<double>(l.device_state_bytes)), " of state stays on the ", c.device)
              : std::string());
  return offload;
}

// Defined with the checkpoint slices below.
void check_outputs_fit_drive(TrainingRun& run);

}  // namespace

int engine_stage(int configured_stage, int world_size, ParamOffload params) {
  if (world_size > 1 || configured_stage == 0) return configured_stage;
  if (configured_stage == 3 && params == ParamOffload::On) return 3;
  return env_equals(EnvVar::ZeroKeepStage, "1") ? configured_stage : 0;
}

std::unique_ptr<TrainingRun> start_training_run(const config::TrainConfig& config) {
  StartupClock clock;
  auto run = std::make_unique<TrainingRun>();
  config::TrainConfig& c = run->config;
  c = config;
  std::unique_ptr<comm::Communicator> host_world = comm::make_world_communicator();
  std::unique_ptr<comm::Communicator> device_world;
  if (c.device == "cuda") {
    // One GPU per process: the launcher's local rank picks it.
    if (!cuda::available())
      ZT_THROW_INPUT(c.source,
                     ": device cuda, but no GPU is visible to this process, or this build has no CUDA "
                     "backend (`zerotrain report` says which): use --device cpu");
    cuda::init(comm::read_launch_env().local_rank % cuda::device_count());
    if (host_world->size() > 1) device_world = comm::make_device_world_communicator(*host_world);
  }
  // Every rank data-parallel: the config has no tensor, pipeline or expert sizes yet.
  const comm::ParallelDims dims = comm::ParallelDims::data_parallel(host_world->size());
  run->mesh = std::make_unique<comm::Mesh>(dims, std::move(host_world), std::move(device_world));
  clock.lap(c.device == "cuda" ? "gpu" : "ranks");
  if (run->world_size() != c.world_size)
    ZT_THROW_INPUT(c.source, ": the config is resolved for world_size ", c.world_size, " but this job has ",
                   run->world_size(), " process(es): start it with `zerotrain launch --num_processes ", c.world_size,
                   " -- zerotrain train ...` (or mpirun -np ", c.world_size, "), or set num_processes to match");
  // One voice: rank 0 logs; the other ranks report only warnings and errors.
  if (run->rank() != 0 && log_level() < LogLevel::Warn) set_log_level(LogLevel::Warn);
  // Every rank has the same config: one copy of its warnings (rank 0's).
  if (run->rank() == 0) {
    for (const std::string& w : c.warnings) ZT_WARN(w);
    for (const std::string& w : config::inert_key_warnings(c, run->world_size())) ZT_WARN(w);
  }
  {
    // Before any host state is allocated: its pages land on the NUMA node of the cores
    // that first touch them.
    const comm::LaunchEnv launch = comm::read_launch_env();
    const std::string bound = bind_rank_for_host_work(c, launch.local_rank, launch.local_world_size);
    if (!bound.empty()) ZT_INFO(bound);
  }
  run->output_dir = c.output_dir;
  // A path that does not exist is bad input: said before the output directory is claimed
  // (and, with overwrite_output_dir, the previous run's files removed).
  config::check_named_paths(c);
  claim_output_dir_on_rank0(*run);

  // Rank 0 trains the tokenizer and tokenizes text data; the other ranks wait for it and
  // read what it wrote (one writer per file). Tokenizing a large corpus takes a while:
  // the wait allows an hour.
  const bool follower = run->world_size() > 1 && run->rank() != 0;
  const comm::Seconds setup_wait(3600.0);
  if (follower) run->world_comm().barrier_async()->wait(setup_wait);
  config::TrainConfig setup_config = follower ? config_reading_prepared_files(c, run->output_dir) : c;
  // One process: every ZeRO partition is the whole model, so stages 1-3 would only add
  // partition copies and per-unit gradient buffers (4-7.5% of a gpt2-xl/Llama-1B step on
  // one H200, and 3 GiB more); they run as stage 0, which holds exactly what they would.
  run->stage = engine_stage(c.zero.stage, run->world_size(),
                            config::offloads_params(c.zero) ? ParamOffload::On : ParamOffload::Off);
  setup_config.zero.stage = run->stage;

  // Model and tokenizer, once the model's states are known to fit.
  const int ranks_on_host = std::max(1, comm::read_launch_env().local_world_size);
  if (!c.model.path.empty()) {
    // The config against the weights' shapes first: a wrong config.json is named as such.
    const model::ModelConfig mc = model::load_hf_config(c.model.path);
    model::check_hf_config_against_weights(mc, c.model.path + "/config.json", c.model.path);
    check_model_state_fits(c, mc, run->stage, run->world_size(), ranks_on_host);
  } else {
    check_model_state_fits(c, from_scratch_config(c.model), run->stage, run->world_size(), ranks_on_host);
  }
  clock.lap("output dir");
  run->setup = setup_model(setup_config, run->output_dir);
  clock.lap(c.model.path.empty() ? "model init" : "model load");
  model::Transformer& model = run->model();
  const model::ModelConfig& mc = model.config();
  const int64_t T = c.data.seq_len > 0 ? c.data.seq_len : mc.max_position_embeddings;
  if (T > mc.max_position_embeddings)
    ZT_THROW_INPUT("data.seq_len ", T, " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);
  const int64_t B = c.micro_batch_per_gpu, gas = c.grad_accum_steps;
  run->seq_len = T;
  run->micro_batch = B;
  run->grad_accum = gas;

  // Data: token shards (prepared from text when needed).
  run->data = setup_data(setup_config, *run->setup.tokenizer, run->output_dir, T, run->rank() == 0);
  clock.lap("data");
  if (run->world_size() > 1 && !follower) run->world_comm().barrier_async()->wait(setup_wait);
  run->loader = std::make_unique<io::BatchLoader>(run->data.train_shards, B, T, c.data_order_seed(), run->dp_rank(),
                                                  run->dp_size(), sample_windows(c));
  run->loader->set_vocab_size(model.config().vocab_size);  // ids past the vocabulary are bad data
  log_sample_windows(*run->loader, c, T, run->rank() == 0);
  run->windows = run->loader->windows_per_epoch();
  if (run->windows < B)
    ZT_THROW_INPUT("the training data has ", run->windows, " windows of ", T + 1,
                   " tokens, fewer than one micro-batch (", B, "): use more data or a smaller seq_len / micro batch");
  check_global_batch_fits_data(c, run->windows, T);
  run->val_batch = settle_validation_batch(c, run->data.val_shards, B, T, run->rank() == 0);
  run->steps_per_epoch = std::max<int64_t>(1, run->windows / (B * gas * c.world_size));
  // Epoch-based runs learn their total step count from the data.
  run->total_steps = c.max_steps;
  if (run->total_steps <= 0) {
    run->total_steps = std::max<int64_t>(1, static_cast<int64_t>(c.epochs * static_cast<double>(run->windows) /
                                                                 static_cast<double>(B * gas * c.world_size)));
    config::set_total_steps(c, run->total_steps);
  }

  // The ZeRO engine shards the model (stage 3: slice by slice into a model built without
  // parameters), then the optimizer is built over this rank's partitions.
  run->engine = std::make_unique<zero::ZeroEngine>(
      model.registry(), zero::dense_unit_groups(*run->mesh, model.registry()), zero_options(c, run->stage));
  if (run->setup.fill_slice) {
    run->engine->shard_model_from_slices(run->setup.fill_slice);
  } else {
    run->engine->shard_model();
  }
  model.set_hooks(run->engine.get());
  if (const zero::ParamStore* store = run->engine->param_store()) log_param_store(c, *store);
  clock.lap("ZeRO");

  // Optimizer, schedule, loss scaler.
  run->optimizer = make_run_optimizer(*run);
  run->schedule = make_schedule(c, run->total_steps);
  zero::LossScalerConfig lsc = c.fp16;
  lsc.enabled = c.precision == config::Precision::F16;
  run->scaler = zero::LossScaler(lsc);

  model.set_checkpointing(c.model.activation_checkpointing ? model::Checkpointing::EveryBlock
                                                           : model::Checkpointing::None);
  model.set_mode(model::Mode::Train);
  check_outputs_fit_drive(*run);
  clock.lap("optimizer");
  ZT_INFO("ready in ", clock.summary());
  return run;
}

namespace {

// Every buffer a rank holds, as slices of the named flat buffers a checkpoint stores.
std::vector<checkpoint::FlatSlice> checkpoint_slices(TrainingRun& run, bool for_load) {
  std::vector<checkpoint::FlatSlice> slices;
  model::ParameterRegistry& reg = run.model().registry();
  for (size_t i = 0; i < reg.size(); ++i) {
    // A LoRA run's frozen base is not saved: a resume reads it from model.path again, and
    // the checkpoint holds the adapters and their optimizer state alone.
    if (reg.unit(i).frozen()) continue;
    checkpoint::FlatSlice s;
    s.name = reg.unit(i).name() + ".params";
    // Parameters swapped to NVMe move through the store's slice I/O, like swapped state.
    zero::ParamSlice p = for_load ? run.engine->param_load_target(i) : run.engine->param_slice(i);
    s.data = p.data;
    s.begin = p.begin;
    s.io = std::move(p.io);
    slices.push_back(std::move(s));
  }
  for (zero::StateSlice& o : run.optimizer->state_slices()) {
    checkpoint::FlatSlice s{o.name, o.data, o.begin};
    s.io = o.io;
    // A checkpoint saved with master_weights: false has no master: it is then initialised
    // from the loaded parameters (load_run_checkpoint).
    s.optional = for_load && o.name.size() > 7 && o.name.compare(o.name.size() - 7, 7, ".master") == 0;
    slices.push_back(std::move(s));
  }
  return slices;
}

// Before step 1, with the NVMe swap files (if any) reserved: output_dir's drive must hold
// final/ and the checkpoints the run keeps, with the one being saved (output_room in
// train/resource_checks.h: the rotation removes the
// oldest only after the new one is complete). Otherwise a run that fills its drive trains
// for hours and then fails writing them ("No space left on device", seen with a swap
// on the output's drive). Rank 0 checks (one output_dir); every rank learns the outcome.
void check_outputs_fit_drive(TrainingRun& run) {
  const config::TrainConfig& c = run.config;
  std::exception_ptr refused;
  if (run.rank() == 0) {
    try {
      double final_bytes = 0, checkpoint_bytes = 0;
      const model::ParameterRegistry& reg = run.model().registry();
      for (size_t i = 0; i < reg.size(); ++i) {
        const model::Unit& u = reg.unit(i);
        if (u.frozen()) continue;  // a LoRA run's final/ holds the adapters only
        final_bytes += static_cast<double>(u.numel()) * static_cast<double>(dtype_size(u.param_dtype()));
      }
      // Stage 0 slices are the whole buffers, of which each rank saves its share; at
      // stages 1-3 they are this rank's partition, the same size on every rank.
      for (const checkpoint::FlatSlice& s : checkpoint_slices(run, false))
        checkpoint_bytes += static_cast<double>(s.data.nbytes());
      if (run.engine->stage() > 0) checkpoint_bytes *= run.world_size();
      // The checkpoints this run writes: every save_every steps and after the last one.
      CheckpointPlan plan;
      if (c.checkpoint_saves != config::CheckpointSaves::None) {
        const int64_t every =
            c.checkpoint_saves == config::CheckpointSaves::Epoch ? run.steps_per_epoch : c.save_interval;
        plan.saves = every > 0 ? run.total_steps / every + (run.total_steps % every != 0 ? 1 : 0) : 1;
      }
      plan.keep_last = c.keep_last;
      plan.keeps_best = c.load_best_model_at_end;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(run.checkpoint_root(), ec))
        if (e.path().filename().string().rfind("global_step", 0) == 0 && e.is_directory(ec)) ++plan.on_disk;
      check_output_drive_room(c, plan, final_bytes, checkpoint_bytes,
                              static_cast<double>(io::free_bytes(run.output_dir.string())));
    } catch (...) {
      refused = std::current_exception();
    }
  }
  const bool any_refused = comm::any_rank(run.world_comm(), refused != nullptr);
  if (refused) std::rethrow_exception(refused);
  if (any_refused) ZT_THROW_INPUT("output_dir '", c.output_dir, "': rank 0 found its drive too full (its error says how full)");
}

}  // namespace

std::string load_run_checkpoint(TrainingRun& run, const std::string& which) {
  std::string dir;
  if (which == "auto") {
    // Restarts: continue from the run's latest checkpoint (the newest complete one when
    // `latest` is missing or bad), or start fresh without one.
    dir = checkpoint::resolve_checkpoint_auto(run.checkpoint_root().string());
    if (dir.empty()) {
      ZT_INFO("--resume auto: no checkpoint in ", run.checkpoint_root().string(), " yet; starting from step 0");
      return "";
    }
  } else {
    dir = checkpoint::resolve_checkpoint(which == "latest" ? run.checkpoint_root().string() : which);
  }
  const checkpoint::CheckpointState s = checkpoint::load_checkpoint(dir, run.model().registry(), checkpoint_slices(run, true));
  run.engine->refresh_after_load();
  if (!s.absent.empty()) {
    ZT_INFO("checkpoint ", dir,
            " has no f32 master weights (saved with master_weights: false): initialising them "
            "from its bf16 parameters; the bf16 optimizer state widens to f32 exactly");
    run.optimizer->init_master_from_params();
  }
  const bool saved_master =
      std::any_of(s.saved_optimizer_state.begin(), s.saved_optimizer_state.end(),
                  [](const std::string& n) { return n.size() > 7 && n.compare(n.size() - 7, 7, ".master") == 0; });
  if (saved_master && run.optimizer->spec().master_weights == zero::MasterWeights::None)
    ZT_INFO("checkpoint ", dir,
            " has f32 master weights; this run has master_weights: false, so it continues from "
            "the saved bf16 parameters and rounds the f32 optimizer state to bf16");
  run.step = s.step;
  run.micro_steps = s.micro_steps;
  run.optimizer->set_steps_taken(s.extra.value("optimizer_steps", s.step));
  run.loader->restore({s.data_epoch, s.data_position});
  // The manifest's loss_scaler fields were range-checked (checkpoint/checkpoint_validate.h).
  if (s.loss_scaler.is_object() && !s.loss_scaler.empty())
    run.scaler.restore({s.loss_scaler.at("scale").get<float>(), s.loss_scaler.at("hysteresis_left").get<int>(),
                        s.loss_scaler.at("clean_steps").get<int64_t>(),
                        s.loss_scaler.at("skipped_steps").get<int64_t>()});
  ZT_INFO("resumed from ", dir, " at step ", run.step, " (", run.world_size(), " rank",
          run.world_size() == 1 ? "" : "s", ", ZeRO stage ", run.engine->stage(), ")");
  return dir;
}

void remove_stale_outputs(TrainingRun& run) {
  if (run.is_main_rank()) {
    std::vector<std::string> removed = checkpoint::remove_stale_checkpoint_temps(run.checkpoint_root().string());
    for (std::string& p : io::remove_stale_staging((run.output_dir / "final").string()))
      removed.push_back(std::move(p));
    // The tokenizer and token shards a killed run was writing (prepared files).
    for (const fs::path& dir : {run.output_dir, run.output_dir / "data"})
      for (std::string& p : io::remove_stale_atomic_temps(dir.string())) removed.push_back(std::move(p));
    for (const std::string& p : removed) ZT_WARN("removed ", p, ", left by an interrupted save of an earlier run");
  }
  // The other ranks resolve `latest` only after rank 0 has repaired and cleaned the root.
  run.world_comm().barrier();
}

std::string save_run_checkpoint(TrainingRun& run, const std::string& root) {
  checkpoint::CheckpointState s;
  s.step = run.step;
  s.micro_steps = run.micro_steps;
  const io::LoaderState ls = run.loader->state();
  s.data_epoch = ls.epoch;
  s.data_position = ls.position;
  s.seed = run.config.seed;
  if (run.scaler.config().enabled) {
    const auto st = run.scaler.state();
    s.loss_scaler = {{"scale", st.scale},
                     {"hysteresis_left", st.hysteresis_left},
                     {"clean_steps", st.clean_steps},
                     {"skipped_steps", st.skipped_steps}};
  }
  // model_config: the HF config.json, so that `zerotrain consolidate` can write an HF
  // directory from the checkpoint alone.
  s.extra = {{"optimizer_steps", run.optimizer->steps_taken()},
             {"total_steps", run.total_steps},
             {"model_config", model::config_to_hf_json(run.model().config())}};
  // The tokenizer and generation config final/ ships with, so that consolidate writes the
  // same HF directory from the checkpoint alone.
  std::error_code abs_ec;
  if (!run.setup.tokenizer_path.empty())
    s.extra["tokenizer"] = fs::absolute(run.setup.tokenizer_path, abs_ec).string();
  if (!run.setup.generation_config.empty())
    s.extra["generation_config"] = fs::absolute(run.setup.generation_config, abs_ec).string();
  // A LoRA checkpoint: the adapters' settings and the base they train on, so that
  // `zerotrain consolidate` writes the adapter folder from the checkpoint alone.
  if (run.setup.lora) {
    model::LoraConfig lc = *run.setup.lora;
    if (lc.base_model_name_or_path.empty()) lc.base_model_name_or_path = run.setup.base_model;
    s.extra["lora"] = model::lora_config_to_peft_json(lc);
  }
  checkpoint::CheckpointWriteOptions wo;
  wo.keep_last = run.config.keep_last;
  wo.keep = run.best_checkpoint;
  wo.zero_stage = run.engine->stage();
  wo.rank = run.rank();
  wo.world_size = run.world_size();
  wo.comm = &run.world_comm();
  const std::string dir = checkpoint::save_checkpoint(root, run.model().registry(), checkpoint_slices(run, false), s, wo);
  ZT_INFO("saved checkpoint ", dir);
  return dir;
}

void enable_phase_timing(TrainingRun& run) {
  if (run.timer) return;
  run.timer = std::make_unique<PhaseTimer>(run.model().options().device);
  run.phase_hooks = std::make_unique<PhaseHooks>(*run.engine, *run.timer);
  run.model().set_hooks(run.phase_hooks.get());
}

bool checks_overflow(const TrainingRun& run) {
  return run.scaler.config().enabled ||
         (run.config.precision == config::Precision::BF16 && run.config.bf16.check_grad_overflow);
}

double mean_over_ranks(TrainingRun& run, double value) {
  return comm::sum_over_ranks(run.world_comm(), value) / static_cast<double>(run.world_size());
}

double validation_loss(TrainingRun& run, int64_t batches) {
  if (run.val_batch == 0 || batches <= 0) return std::nan("");
  const int64_t B = run.val_batch, T = run.seq_len;
  io::BatchLoader loader(run.data.val_shards, B, T, run.config.data_order_seed() ^ 0xE7A1ull, 0, 1,
                         sample_windows(run.config));
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  const OwnedTensor seg = loader.packs_samples() ? OwnedTensor({B, T}, DType::I32) : OwnedTensor();
  model::Transformer& model = run.model();
  model.set_mode(model::Mode::Eval);
  double sum = 0;
  int64_t count = 0;
  const int64_t n = std::min<int64_t>(batches, std::max<int64_t>(1, loader.windows_per_epoch() / B));
  for (int64_t i = 0; i < n; ++i) {
    loader.next(tok, tgt, seg);
    const auto r = model.forward(tok, tgt, seg);
    sum += r.loss_sum;
    count += r.count;
  }
  run.engine->flush();
  model.set_mode(model::Mode::Train);
  return count ? sum / static_cast<double>(count) : std::nan("");
}

}  // namespace zt::train
