// Which GPUs of which nodes run ranks: DeepSpeed's launcher selection (`deepspeed
// --include worker-1:0,1@worker-2`, `--exclude`, `--num_nodes`, `--num_gpus`) over a
// hostfile's hosts (GPUs 0..slots-1 each) or this machine, and Accelerate's gpu_ids. One rank
// runs per chosen GPU, and a node's ranks see exactly its chosen GPUs (CUDA_VISIBLE_DEVICES),
// as DeepSpeed's per-node launcher sets them.
#pragma once
#include <string>
#include <vector>

namespace zt::cli {

// A node and the GPU numbers its ranks use, one rank per GPU, in order.
struct NodeGpus {
  std::string host;
  std::vector<int> gpus;
};

// DeepSpeed's selection flags; empty / 0 means not given.
struct GpuSelection {
  std::string include;  // "host[:id,id...][@host...]": only these hosts / GPUs
  std::string exclude;  // the same syntax: all but these
  int num_nodes = 0;    // the first N hosts
  int num_gpus = 0;     // GPUs 0..N-1 of every host
  bool given() const { return !include.empty() || !exclude.empty() || num_nodes > 0 || num_gpus > 0; }
};

// Where the selection chooses from. `open` is this machine when CUDA sees no GPU (CPU
// ranks): an --include or --num_gpus then names the ranks' numbers itself, since there is
// no list of GPUs to check them against, and --exclude has nothing to remove from.
struct GpuPool {
  std::vector<NodeGpus> nodes;
  std::string name;  // "hostfile FILE", "this machine (CUDA sees 4 GPUs)": for messages
  bool open = false;
};

// The hosts and GPUs the selection leaves of the pool, in the pool's order (DeepSpeed's
// parse_inclusion_exclusion, then num_nodes / num_gpus). Throws BadInput naming the flag and
// the fix for a host or GPU the pool lacks, --include with --exclude, --num_nodes /
// --num_gpus with either, or a selection that leaves no GPU.
std::vector<NodeGpus> select_gpus(const GpuPool& pool, const GpuSelection& selection);

// "0,1,3" -> {0, 1, 3} (Accelerate's gpu_ids, a filter's GPU list): distinct numbers >= 0.
// Throws BadInput naming `what`.
std::vector<int> parse_gpu_list(const std::string& text, const std::string& what);
std::string gpu_list_text(const std::vector<int>& gpus);  // {0, 1, 3} -> "0,1,3"

// The rank wrapper's `--node-gpus` value when nodes use different GPUs: "0,1;2,3" (one
// list per node, in rank order), and the list a rank sees under it: ranks are placed node
// by node, as many on a node as its list has GPUs. Throws BadInput for a malformed value or
// a rank past the last node.
std::string node_gpus_text(const std::vector<NodeGpus>& nodes);
std::vector<int> gpus_of_rank(const std::string& node_gpus, int rank);

}  // namespace zt::cli
