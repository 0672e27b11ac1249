// The files and directories a resolved config names must exist: `zerotrain config check`
// says so up front (exit 2 naming the key, the path and where it was written) instead of
// `config OK` for a run that would fail when it opens them.
#pragma once
#include <string>

#include "config/config.h"

namespace zt::config {

// The one rule for a path written inside a config file (a run config's model.path,
// data.train, deepspeed, ...; an Accelerate YAML's deepspeed_config_file): an absolute
// path as written; a relative one from the directory of the file that names it, wherever
// zerotrain is started (`./x` and `../x` too); the current directory only when spelled so,
// with a leading `$PWD/` (or `${PWD}/`, or `$PWD` alone), as in a shell. Paths given on
// the command line are not passed here: they are taken from the current directory, as a
// shell user expects. `naming_file` "" (no file): the path as written, `$PWD` expanded.
// Outputs (output_dir, logging_dir) are not inputs of the file and are not placed: they
// are relative to the current directory, as HF Trainer writes them.
std::string path_in_file(const std::string& path, const std::string& naming_file);

// model.path, model.tokenizer, every data.train / data.validation entry. Throws BadInput
// for the first one missing. (The ds_config and Accelerate YAML are opened while loading,
// which reports a missing one already.)
void check_named_paths(const TrainConfig& c);

}  // namespace zt::config
