#include "train/rank_binding.h"

#include <algorithm>

#include "core/cpu_topology.h"
#include "core/env_vars.h"
#include "core/log.h"
#include "core/parallel.h"

namespace zt::train {

std::string bind_rank_for_host_work(const config::TrainConfig& c, int local_rank, int local_world_size) {
  const bool offload = c.zero.offload_optimizer.device == config::OffloadDevice::CPU;
  if (!offload || local_world_size <= 1 || env_equals(EnvVar::CpuBind, "none")) return "";
  // A launcher (mpirun --bind-to core, srun --cpu-bind, taskset) that bound the process
  // made its own choice.
  if (process_is_restricted()) return "";
  const CpuTopology topology = read_cpu_topology();
  const RankCpus mine = rank_cpus(topology, local_rank, local_world_size);
  std::string why;
  if (!bind_process_to(mine.cpus, &why)) {
    ZT_WARN("ZT_CPU_BIND: could not bind local rank ", local_rank, " to CPUs ", format_cpu_list(mine.cpus), " (",
            why, "); its threads run anywhere");
    return "";
  }
  const int threads = std::min(num_threads(), static_cast<int>(mine.cpus.size()));
  set_num_threads(threads);
  return str("local rank ", local_rank, " of ", local_world_size, ": host work on CPUs ", format_cpu_list(mine.cpus),
             " (NUMA node ", mine.node, " of ", topology.nodes.size(), "), ", threads, " threads (ZT_CPU_BIND=none: no binding)");
}

}  // namespace zt::train
