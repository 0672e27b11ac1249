// ZeRO-Offload with several ranks on one machine: each rank's host work (the optimizer
// step, its staging copies) on its own block of cores inside one NUMA node, and its host
// memory first touched there (core/cpu_topology.h).
#pragma once
#include <string>

#include "config/config.h"

namespace zt::train {

// Binds this process when the run offloads to the CPU, the machine runs more than one of
// its ranks, ZT_CPU_BIND is not `none` and nothing bound the process already (its allowed
// CPUs are every CPU the machine lists); then caps the thread count to the block. Call
// before the host buffers are allocated. Returns the log line ("" when it did nothing).
std::string bind_rank_for_host_work(const config::TrainConfig& c, int local_rank, int local_world_size);

}  // namespace zt::train
