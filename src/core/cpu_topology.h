// Which CPUs a rank's host work runs on when several ranks share a machine (ZeRO-Offload's
// host optimizer): each rank gets its own block of cores inside one NUMA node, so that its
// threads do not contend with the other ranks' and the host memory it first touches (its
// optimizer partition, its staging) is allocated on that node, next to the cores that
// stream through it. Ranks fill the nodes in order (local ranks 0..L/N-1 on node 0, ...),
// which is how GPUs are usually numbered against sockets.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace zt {

// The CPUs of each NUMA node that has any (ascending), as the kernel lists them in
// /sys/devices/system/node/node*/cpulist; one node holding every CPU this process may use
// where that is not readable.
struct CpuTopology {
  std::vector<std::vector<int>> nodes;
};
CpuTopology read_cpu_topology();

// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; nullopt on anything else.
std::optional<std::vector<int>> parse_cpu_list(const std::string& text);
// {0, 1, 2, 3, 8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);

struct RankCpus {
  int node = 0;           // the NUMA node (index into CpuTopology::nodes)
  std::vector<int> cpus;  // at least one
};
// The share of `local_rank` of `local_world_size` ranks on this machine: ranks are spread
// over the nodes in blocks (node = local_rank * nodes / local_world_size, when there are
// at least as many ranks as nodes; else one node per rank), and the node's CPUs are cut
// into equal contiguous blocks among its ranks (a rank beyond its node's CPU count shares
// them round-robin).
RankCpus rank_cpus(const CpuTopology& topology, int local_rank, int local_world_size);

// The CPUs this process may run on now (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();
// Whether something (a launcher's binding, taskset, a cgroup's cpuset) already restricted
// this process to fewer CPUs than the machine has online.
bool process_is_restricted();
// Restricts this process (every thread it starts from now on) to `cpus`; false, with the
// reason in *why, when the kernel refuses.
bool bind_process_to(const std::vector<int>& cpus, std::string* why);

}  // namespace zt
