// The files and directories a resolved config names must exist: `zerotrain config check`
// says so up front (exit 2 naming the key, the path and where it was written) instead of
// `config OK` for a run that would fail when it opens them.
#pragma once
#include "config/config.h"

namespace zt::config {

// model.path, model.tokenizer, every data.train / data.validation entry. Throws BadInput
// for the first one missing. (The ds_config and Accelerate YAML are opened while loading,
// which reports a missing one already.)
void check_named_paths(const TrainConfig& c);

}  // namespace zt::config
