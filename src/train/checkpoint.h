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
// A checkpoint is written into a temporary directory and renamed into place, then
// `latest` is replaced atomically: a crash at any point leaves the previous checkpoint
// intact and `latest` naming a complete one. Loading re-assembles each flat buffer from
// the shards using the manifest, so a checkpoint loads at any world size.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/registry.h"

namespace zt::train {

struct CheckpointState {
  int64_t step = 0;              // optimizer steps taken
  int64_t micro_steps = 0;       // forward/backward passes taken
  uint64_t data_epoch = 0;
  uint64_t data_position = 0;
  uint64_t seed = 0;
  nlohmann::json loss_scaler;    // LossScaler::State as JSON (null when unused)
  nlohmann::json extra;          // anything else the trainer wants back (config, metrics)
};

struct CheckpointWriteOptions {
  int rank = 0;
  int world_size = 1;
  int zero_stage = 0;
  int64_t keep_last = 0;  // 0 keeps all
};

// Writes <root>/global_step<N>/ (N = state.step) atomically and updates <root>/latest.
// `optimizer_state` are flat per-unit tensors named "<unit>.<state>" with the unit's
// padded_numel elements. Returns the checkpoint directory.
std::string save_checkpoint(const std::string& root, const model::ParameterRegistry& registry,
                            const std::vector<std::pair<std::string, Tensor>>& optimizer_state,
                            const CheckpointState& state, const CheckpointWriteOptions& options);

// Resolves "latest" (reads <root>/latest) or a checkpoint directory path. Throws BadInput
// with the fix when there is none.
std::string resolve_checkpoint(const std::string& root_or_dir, const std::string& which = "latest");

// Loads parameters and optimizer state into the given tensors (same names and sizes as
// when saving; the unit layout must match the manifest — a checkpoint of another model
// is refused naming the first difference). Returns the saved state.
CheckpointState load_checkpoint(const std::string& dir, model::ParameterRegistry& registry,
                                const std::vector<std::pair<std::string, Tensor>>& optimizer_state);

}  // namespace zt::train
