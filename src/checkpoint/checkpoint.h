// Training checkpoints: everything a run needs to continue exactly where it stopped.
//
//   <dir>/checkpoints/global_step<N>/
//       manifest.json               format, step, world size, ZeRO stage, unit layout
//                                   (names, offsets, shapes), dtypes, optimizer state
//                                   names, loss scaler, data position, seed, extra
//       shard_rank<r>.safetensors   rank r's slice [r*P, (r+1)*P) of every unit's flat
//                                   buffers: "<unit>.params" and each optimizer state
//                                   ("<unit>.exp_avg", "<unit>.master", ...)
//   <dir>/checkpoints/latest        the name of the newest complete checkpoint
//
// A checkpoint is written into a temporary directory (every rank writes its shard there)
// and renamed into place by rank 0 once all ranks succeeded (an existing step of the same
// number is swapped out atomically, io::replace_directory), then `latest` is replaced
// atomically: a crash at any point leaves `latest` naming a complete checkpoint. The
// manifest and shards are validated on load (checkpoint/checkpoint_validate.h). Loading copies, for each buffer a rank holds (a whole flat
// buffer, or its ZeRO slice), the overlapping pieces of the saved slices, reading only
// the shards that overlap: a checkpoint loads at any world size and any ZeRO stage.
// Multi-rank saving assumes the checkpoint directory is on a filesystem every rank sees.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "comm/communicator.h"
#include "model/registry.h"
#include "zero/optimizer.h"

namespace zt::checkpoint {

struct CheckpointState {
  int64_t step = 0;         // optimizer steps taken
  int64_t micro_steps = 0;  // forward/backward passes taken
  uint64_t data_epoch = 0;
  uint64_t data_position = 0;
  uint64_t seed = 0;
  nlohmann::json loss_scaler;  // LossScaler::State as JSON (null when unused)
  nlohmann::json extra;        // anything else the trainer wants back (config, metrics)
  // Filled by load_checkpoint: the optimizer state names the manifest lists, and the
  // optional targets the checkpoint did not have (left untouched).
  std::vector<std::string> saved_optimizer_state;
  std::vector<std::string> absent;
};

struct CheckpointWriteOptions {
  int rank = 0;
  int world_size = 1;
  int zero_stage = 0;
  int64_t keep_last = 0;  // 0 keeps all
  std::string keep;       // a checkpoint (global_stepN) the rotation never removes: the best one
  // The ranks that save together (barriers, agreeing on success); nullptr: one process.
  comm::Communicator* comm = nullptr;
};

// Elements [begin, begin + data.numel()) of the flat buffer `name` ("<unit>.params",
// "<unit>.exp_avg", ...). The unit is the part of the name before the last '.'.
// Loading converts the dtype (f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact),
// so optimizer state saved in one dtype loads into a run keeping it in the other.
struct FlatSlice {
  std::string name;
  Tensor data;
  int64_t begin = 0;
  // Loading only: a checkpoint without this tensor is not an error; the target is left as
  // it is and its name goes to CheckpointState::absent (e.g. "<unit>.master" when the
  // checkpoint was saved with master_weights: false).
  bool optional = false;
  // State that is not in memory (NVMe-swapped, zero/state_store.h): `data` has the shape
  // and dtype only; saving reads the rank's slice through `io` into the file's buffer and
  // loading writes through it, a piece at a time.
  std::shared_ptr<zero::SliceIo> io{};
};

// Params as slices: each unit's whole flat parameter buffer ("<unit>.params", begin 0).
std::vector<FlatSlice> whole_param_slices(const model::ParameterRegistry& registry);

// Writes <root>/global_step<N>/ (N = state.step) atomically and updates <root>/latest.
// Rank r stores elements [r*P, (r+1)*P) of every buffer (P = the unit's padded_numel /
// world_size); each slice given must contain that range. Collective over options.comm.
// Returns the checkpoint directory.
// The directory every rank writes its shard of step `step` into (inside the marked folder
// <root>/.global_step<N>.tmp that rank 0 creates): global_step<N> once it is complete.
std::string checkpoint_staging_dir(const std::string& root, int64_t step);

std::string save_checkpoint(const std::string& root, const model::ParameterRegistry& registry,
                            const std::vector<FlatSlice>& slices, const CheckpointState& state,
                            const CheckpointWriteOptions& options);

// Resolves "latest" (reads <root>/latest) or a checkpoint directory path. Throws BadInput
// with the fix when there is none.
std::string resolve_checkpoint(const std::string& root_or_dir, const std::string& which = "latest");

// --resume auto: `latest`'s checkpoint when it is complete, else the newest complete
// global_stepN (with a warning saying why), else "" (start from step 0).
std::string resolve_checkpoint_auto(const std::string& root);

// The newest global_stepN under `root` whose manifest and shards validate; "" when none.
std::string newest_complete_checkpoint(const std::string& root);

// Removes what interrupted saves of dead runs left in a checkpoint root: the marked folders
// (io/output_file.h) .global_stepN.tmp, .old and .del, and write_file_atomic's marked
// latest.tmp-<pid>-<n> of a dead pid; a folder of those names without zerotrain's marker
// is left alone. An aside checkpoint whose global_stepN is missing is put back first.
// Call it at the start of a run, on rank 0, before any save. Returns the removed paths.
std::vector<std::string> remove_stale_checkpoint_temps(const std::string& root);

// Fills each target slice from the checkpoint (names as saved; the unit layout must match
// the manifest — a checkpoint of another model is refused naming the first difference;
// a missing shard or tensor is an error naming it). Returns the saved state.
CheckpointState load_checkpoint(const std::string& dir, const model::ParameterRegistry& registry,
                                const std::vector<FlatSlice>& targets);

}  // namespace zt::checkpoint
