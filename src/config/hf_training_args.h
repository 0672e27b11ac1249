// HF TrainingArguments fields that the run table (config_keys_run.cpp) has no key for: every
// other field of transformers' TrainingArguments (5.x, and the 4.x spellings users still
// write), each with what a run file or command line holding it gets here. Users bring their
// TrainingArguments as they are; a field is either
//   - without effect here (logging, hub, dataloader workers, torch.compile, DDP knobs...):
//     accepted, silent at HF's default, one warning naming it and why otherwise; or
//   - refused unless at HF's default, because it would change what is trained (label
//     smoothing, NEFTune, FSDP, a sampling strategy...): exit 2 naming it and the fix.
// The table is also docs/configs.md's list (`zerotrain config keys --markdown hf_training_args`).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config_value.h"

namespace zt::config {

enum class HfArgEffect { None, RefusedUnlessDefault };

struct HfTrainingArg {
  std::string name;
  nlohmann::json hf_default;  // null: HF's None
  HfArgEffect effect;
  std::string why;  // the warning's or the error's reason, with the fix where there is one
};

const std::vector<HfTrainingArg>& hf_training_args();

// Takes every hf_training_args() field out of the top level of a run document: a value at
// HF's default is dropped silently, another adds a warning (HfArgEffect::None) or throws
// BadInput naming `top.key(name)` (RefusedUnlessDefault).
void take_hf_training_args(nlohmann::json& doc, const Where& top, std::vector<std::string>& warnings);

// The table as markdown, as docs/configs.md shows it.
std::string hf_training_args_markdown();

}  // namespace zt::config
