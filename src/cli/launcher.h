// `zerotrain launch`: turns torchrun / Accelerate / DeepSpeed style launch settings into
// the command that starts every rank (mpirun, or srun inside a SLURM allocation, or the
// command itself for one process), then runs it: signals forwarded, restarts on failure.
//
// Ranks are started through this program again (`zerotrain launch --rank-env -- CMD`), which
// turns the MPI / SLURM rank variables into RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
// before it becomes CMD, so that any command sees the torchrun variables.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/launch_selection.h"
#include "cli/launch_training_args.h"

namespace zt::cli {

// One line of a DeepSpeed hostfile: `worker-1 slots=4`.
struct HostSlots {
  std::string host;
  int slots = 0;
};

// DeepSpeed hostfile: `hostname slots=N` per line, `#` comments, blank lines. Throws BadInput
// naming file:line for a malformed line, a repeated host, or a file without hosts.
std::vector<HostSlots> parse_hostfile(const std::string& path);
std::vector<HostSlots> parse_hostfile_text(const std::string& text, const std::string& source);

// torchrun's --nproc-per-node words: one process per GPU, per CPU, or GPUs when there are.
enum class ProcessesPerNode { Number, Gpu, Cpu, Auto };

// The command-line flags. A zero / negative / empty value means "not given": the config
// file, the hostfile, the SLURM allocation or the default decides it.
struct LaunchOptions {
  int nproc_per_node = 0;  // processes per node (torchrun --nproc-per-node, deepspeed --num_gpus
                           // without a hostfile)
  ProcessesPerNode nproc_word = ProcessesPerNode::Number;  // --nproc-per-node gpu|cpu|auto
  int num_processes = 0;                                   // processes over all nodes (accelerate --num_processes)
  int nnodes = 0;                                          // --nnodes / --num_machines
  int node_rank = -1;                                      // --node-rank / --machine_rank
  std::string master_addr;                                 // --master-addr / --main_process_ip
  int master_port = 0;                                     // --master-port / --main_process_port
  std::string hostfile;                                    // DeepSpeed format
  std::string config_file;           // Accelerate YAML (a DeepSpeed config here is accepted and ignored)
  GpuSelection gpus;                 // deepspeed --include / --exclude / --num_nodes / --num_gpus
  std::string gpu_ids;               // accelerate --gpu_ids 0,1 ("" or "all": every GPU)
  bool multi_gpu = false;            // accelerate --multi_gpu: one process per GPU when nothing counts them
  int threads_per_process = 0;       // accelerate --num_cpu_threads_per_process (ZT_NUM_THREADS)
  bool standalone = false;           // torchrun --standalone: this node only, rank 0 on 127.0.0.1, a free port
  std::string rdzv_backend;          // torchrun --rdzv_backend: c10d or static
  std::string rdzv_endpoint;         // torchrun --rdzv_endpoint HOST[:PORT]: rank 0's host and port
  AccelerateTrainingFlags training;  // accelerate --mixed_precision, --use_deepspeed, --zero_stage, ...
  std::vector<std::string> command;  // what every rank runs
};

// What the plan depends on besides the flags: this process's environment and identity.
struct LaunchContext {
  std::vector<std::pair<std::string, std::string>> env;  // PATH, SLURM_*, ZT_*, ...
  bool is_root = false;                                  // mpirun refuses root unless told --allow-run-as-root
  std::string self_exe;                                  // this zerotrain, which wraps each rank (--rank-env)
  int cpu_count = 1;                                     // for the default CPU threads per rank
  std::function<int()> gpu_count;  // the GPUs CUDA sees here (asked only when a flag needs it); unset: none
  std::function<int()> free_port;  // a TCP port free on this host now (--standalone); unset: 29500
  static LaunchContext current();
  const char* get(const std::string& name) const;  // nullptr when unset
  int gpus() const { return gpu_count ? gpu_count() : 0; }
};

enum class Runner { Direct, Mpirun, Srun };

struct LaunchPlan {
  Runner runner = Runner::Direct;
  int world_size = 1;
  int nnodes = 1;
  // mpirun / srun and their options, without the variables below; empty for a direct run.
  std::vector<std::string> launcher;
  // Variables every rank gets (MASTER_ADDR, ZT_RESTART_COUNT, ...): `-x K=V` for mpirun,
  // `--export=ALL,K=V` for srun, the environment of a direct run. In order.
  std::vector<std::pair<std::string, std::string>> exports;
  // Variables of this environment that mpirun passes on to remote ranks (`-x NAME`).
  std::vector<std::string> forwarded;
  // `<zerotrain> launch --rank-env [--node-gpus LISTS] --` before the command under mpirun / srun.
  std::vector<std::string> rank_wrapper;
  std::vector<std::string> command;
  // Things worth telling the user (a config file that was not read for launch values).
  std::vector<std::string> notes;

  std::vector<std::string> argv() const;
  // Variables set in the environment of the process that argv() starts.
  std::vector<std::pair<std::string, std::string>> process_env() const;
};

// Pure apart from reading the config file and hostfile and looking for mpirun/srun on the
// context's PATH. Throws BadInput for inconsistent settings (naming the file and the fix).
LaunchPlan build_launch_plan(const LaunchOptions& options, const LaunchContext& context);

// The plan of restart k (1-based): ZT_RESTART_COUNT=k, and `--resume auto` appended to a
// `zerotrain train` command that has no --resume of its own.
LaunchPlan plan_for_restart(const LaunchPlan& plan, int restart);

// One shell line: `K=V ... argv...`, quoted where needed (what --dry-run prints).
std::string format_plan(const LaunchPlan& plan);
std::string shell_quote(const std::string& word);

// Runs the plan in its own process group, forwarding SIGINT/SIGTERM to that group; on a
// non-zero exit runs plan_for_restart(plan, k) for k = 1..max_restarts, unless the exit
// followed a forwarded signal. Returns the job's last exit code (128+N for signal N).
int run_launch(const LaunchPlan& plan, int max_restarts);

// The rank wrapper: reads the launcher's rank variables (OpenMPI, PMI, SLURM), sets RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (and MASTER_ADDR/PORT when unset), and
// CUDA_VISIBLE_DEVICES to its node's list of `node_gpus` ("0,1;2,3", see gpus_of_rank; ""
// leaves it), then replaces this process with `command`. Returns only by throwing.
[[noreturn]] void exec_as_rank(const std::vector<std::string>& command, const std::string& node_gpus = "");

}  // namespace zt::cli
