// Up-front checks of a resolved run against the machine and the data, before anything
// large is allocated or a step starts: a run that cannot work exits 2 with the numbers
// instead of running out of memory, or of a step that never ends.
#pragma once
#include <cstdint>
#include <filesystem>

#include "model/config.h"
#include "config/config.h"

namespace zt::train {

// The model's parameters + gradients + optimizer state per rank (as the ZeRO engine will
// hold them at `stage` over `world_size` ranks) against free host memory (CPU runs: the
// `ranks_on_host` ranks of this machine together) or the GPU's memory (cuda runs: one GPU
// per rank). BadInput naming the bytes needed and what is free.
void check_model_state_fits(const config::TrainConfig& c, const model::ModelConfig& mc, int stage, int world_size,
                            int ranks_on_host = 1);

// ZeRO-Offload's host bytes (the offloaded optimizer state and its staging, or with
// offload_param the parameters' host partitions) for the `ranks_on_host` ranks of this
// machine against its available memory; BadInput with the numbers. Does nothing without
// offload_optimizer cpu. check_model_state_fits calls it for GPU runs.
void check_offload_fits_host(const config::TrainConfig& c, const model::ModelConfig& mc, int stage, int world_size,
                             int ranks_on_host = 1);

// The global batch (micro batch x gradient_accumulation_steps x world size) must not
// exceed the training data's windows per epoch: one optimizer step would otherwise loop
// over the data more than once (a huge gradient_accumulation_steps never ends a step).
void check_global_batch_fits_data(const config::TrainConfig& c, int64_t windows, int64_t seq_len);

// The checkpoints a run writes into its output_dir, for the free-space check below.
struct CheckpointPlan {
  int64_t keep_last = 0;    // 0: every checkpoint is kept
  bool keeps_best = false;  // load_best_model_at_end: the best may be kept beside the last keep_last
  int64_t saves = 0;        // checkpoints this run writes (0: save_strategy no)
  int64_t on_disk = 0;      // checkpoints in the folder before the run (a resumed run's)
};
// The output drive's fullest moments, in checkpoints this run adds to what is on it now: at
// a save, the kept ones and the one being written (the rotation removes the oldest only
// after the new one is complete: keep_last + 1, one more with the best kept aside); at the
// end, the kept ones beside final/.
struct OutputRoom {
  int64_t checkpoints_at_save = 0, checkpoints_with_final = 0;
  double bytes = 0;  // the larger of the two moments
};
OutputRoom output_room(const CheckpointPlan& plan, double final_bytes, double checkpoint_bytes);
// BadInput naming output_dir, the free bytes and what needs them when `free_bytes` is less
// than output_room's.
void check_output_drive_room(const config::TrainConfig& c, const CheckpointPlan& plan, double final_bytes,
                             double checkpoint_bytes, double free_bytes);

// Every folder the run will write (output_dir for the lock, metrics.jsonl and final/; its
// checkpoints/; logging_dir with report_to tensorboard; csv_monitor's folder), created
// when missing and probed with a real file creation (io::probe_writable_dir: root ignores
// permission bits, so they prove nothing): a read-only or impossible one is exit 2 at
// start-up, naming it, instead of an error at the first save after the training time.
// Rank 0, before anything else is written there: a refused run leaves nothing that makes
// its own retry look like a previous run.
void check_outputs_writable(const config::TrainConfig& c, const std::filesystem::path& output_dir);

}  // namespace zt::train
