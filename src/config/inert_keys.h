// Accepted config keys that change nothing in this run, said once each (DESIGN.md: "a key
// that is accepted but has no effect here says so"). Which ones depends on the device and
// the world size the run has, so this runs when the job starts, not when configs load.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace zt::config {

// One warning per key whose value has no effect with `world_size` ranks on c.device
// (keys left at their defaults say nothing). CPU/NVMe offload on the GPU is the loud one:
// no memory is saved until offload lands.
std::vector<std::string> inert_key_warnings(const TrainConfig& c, int world_size);

}  // namespace zt::config
