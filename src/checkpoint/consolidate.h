// Checkpoint -> Hugging Face model directory (`zerotrain consolidate`), the equivalent of
// DeepSpeed's zero_to_fp32.py.
//
// A training checkpoint (checkpoint/checkpoint.h) holds every unit's flat parameter buffer cut
// into world_size slices, one per shard file, next to the optimizer state. Consolidating
// rebuilds the model skeleton from the manifest's HF config (extra.model_config), checks
// that the manifest's unit layout is that model's, copies each rank's slice of each unit
// into the skeleton's flat buffers and writes an HF directory with model::save_pretrained.
//
// Only the weight tensors are read: "<unit>.master" (the exact fp32 weights of a 16-bit
// run) when it exists and the output dtype differs from the run's parameter dtype,
// otherwise "<unit>.params". Optimizer moments are never touched, so the memory needed is
// one copy of the model in the output dtype (the shards are memory-mapped).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/hf_dir.h"

namespace zt::checkpoint {

// One unit done, for progress output.
struct ConsolidateProgress {
  size_t index = 0;  // 0-based
  size_t count = 0;  // number of units
  std::string unit;
  std::string source;  // "master" or "params"
  int64_t elements = 0;
};

struct ConsolidateOptions {
  DType dtype = DType::F32;  // of the output files: f32, bf16 or f16
  uint64_t max_shard_size = model::kDefaultMaxShardSize;
  std::vector<std::string> tokenizer_files;  // as SavePretrainedOptions::tokenizer_files
  // An HF config.json, or a directory holding one: the model when the manifest has no
  // extra.model_config (checkpoints from before it was recorded). Overrides the manifest's.
  std::string config_path;
  std::function<void(const ConsolidateProgress&)> on_unit;  // called after each unit
};

struct ConsolidateSummary {
  std::string checkpoint_dir;  // the resolved checkpoint directory
  int64_t step = 0;
  int world_size = 0;
  int64_t parameters = 0;  // as written to the HF files (no vocab padding)
  uint64_t bytes = 0;      // bytes of weights written
  std::string source;      // "master" or "params" (the tensors read)
  double seconds = 0;
};

// `checkpoint` is a checkpoint directory (holding manifest.json) or a checkpoint root
// (holding `latest`). Writes the HF directory `out` atomically (model::save_pretrained).
// Bad input (no manifest, missing shard, another model's layout, no model config) throws
// BadInput naming the file and the fix.
ConsolidateSummary consolidate_checkpoint(const std::string& checkpoint, const std::string& out,
                                          const ConsolidateOptions& options);

}  // namespace zt::checkpoint
