// The resolved configuration as text, one "key = value   [origin]" line per setting,
// grouped by section: what `zerotrain config check` prints and what a run logs at start,
// so a user sees every value the run will use and where it came from.
#pragma once
#include <string>

#include "config/config.h"

namespace zt::config {

std::string describe_config(const TrainConfig& config);

const char* precision_name(Precision p);
const char* offload_device_name(OffloadDevice d);

}  // namespace zt::config
