// The one reader and validator of checkpoint manifests and shards, shared by resume
// (checkpoint/checkpoint.cpp) and `zerotrain consolidate` (checkpoint/consolidate.cpp).
//
// Every field of manifest.json is type- and range-checked before anything divides by,
// allocates from or indexes with it: world_size in [1, kMaxCheckpointWorldSize], step and
// counters >= 0, each unit's numel and padded_numel (a multiple of world_size of at least
// max(numel, 1), never 0), parameter offsets and shapes inside the unit and in
// order, optimizer state names of known units, the loss scaler's fields. A shard tensor
// must exist with exactly the manifest's length and the dtype its unit says (params: the
// manifest's param_dtype; master: f32; optimizer state: a float type) — an I32 tensor is
// refused, never converted. Every problem is BadInput (exit 2) naming the file and field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/registry.h"

namespace zt::checkpoint {

// What manifest.json's "format" and "version" say; the writer (checkpoint.cpp) and this
// validator share them.
inline constexpr const char* kCheckpointFormat = "zerotrain-checkpoint";
inline constexpr int kCheckpointVersion = 1;

constexpr int kMaxCheckpointWorldSize = 1 << 20;

struct ManifestParam {
  std::string name;
  int64_t offset = 0;
  Shape shape;
};

struct ManifestUnit {
  std::string name;
  int64_t numel = 0;
  int64_t padded_numel = 0;
  int64_t part = 0;  // padded_numel / world_size: the length of each rank's slice
  std::vector<ManifestParam> params;
};

struct CheckpointManifest {
  std::string path;  // .../manifest.json
  std::string dir;
  int world_size = 1;
  int zero_stage = 0;
  int64_t step = 0;
  int64_t micro_steps = 0;
  DType param_dtype = DType::F32;
  std::vector<ManifestUnit> units;
  std::vector<std::string> optimizer_state;
  uint64_t data_epoch = 0;
  uint64_t data_position = 0;
  uint64_t seed = 0;
  nlohmann::json loss_scaler;   // null, or an object with checked fields
  nlohmann::json extra;         // an object (maybe empty)
  nlohmann::json model_config;  // extra.model_config, null when absent

  const ManifestUnit* find_unit(const std::string& name) const;
  std::string shard_path(int rank) const;
};

// Reads and validates <dir>/manifest.json. Throws BadInput naming the file and field.
CheckpointManifest read_checkpoint_manifest(const std::string& dir);

// The manifest's unit layout must be this model's (names, numel, parameter names, offsets,
// shapes; padding may differ with the world size). Names the first difference; `hint`
// ends the message.
void check_manifest_layout(const CheckpointManifest& m, const model::ParameterRegistry& registry,
                           const std::string& hint);

// Every rank's shard file is present (before any work). Names the missing rank.
void check_shards_present(const CheckpointManifest& m);

// The dtype a shard tensor of this checkpoint must have: "<unit>.params" the manifest's
// param_dtype, "<unit>.master" f32; optimizer state any float type (DType::F32 returned,
// with `any_float` set).
DType expected_shard_dtype(const CheckpointManifest& m, const std::string& tensor, bool* any_float);

// Rank `rank`'s slice of the flat buffer `tensor` from its opened shard: present, 1-D with
// the unit's part length, the expected dtype. Throws BadInput naming the shard file.
Tensor checked_shard_tensor(const CheckpointManifest& m, const io::SafetensorsReader& shard, const std::string& tensor,
                            int rank);

// Non-finite values (NaN/Inf) in what a checkpoint holds: NaN weights or state would train
// on as NaN (or be exported as such), so none is ever loaded or saved.
// A piece of shard tensor `tensor` read from `shard_path` (host): BadInput naming both.
void check_loaded_finite(const std::string& shard_path, const std::string& tensor, const Tensor& piece);
// What a save is about to write for `tensor` (host): BadInput naming it; the save then
// fails before anything is renamed into place, so `latest` and the checkpoints that keep_last
// keeps are the earlier, finite ones.
void check_saved_finite(const std::string& tensor, const Tensor& data);

// Whether `dir` holds a checkpoint that validates: its manifest, and every rank's shard
// present, whole (not truncated) and holding each tensor a resume reads with the dtype and
// length the manifest gives; `why` gets the reason when not. Never throws for bad files.
bool checkpoint_complete(const std::string& dir, std::string* why = nullptr);

}  // namespace zt::checkpoint
