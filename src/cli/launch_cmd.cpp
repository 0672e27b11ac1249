// zerotrain launch: start a command on every rank of a job (mpirun, srun, or directly),
// with torchrun / Accelerate / DeepSpeed launch flags. The work is in cli/launcher.h.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "cli/launcher.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain launch [options] [--] COMMAND [ARGS...]

Runs COMMAND as every rank of a job: through mpirun (OpenMPI), through srun inside a SLURM
allocation, or directly for one process. Each rank sees RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and ZT_RESTART_COUNT. SIGINT/SIGTERM are
passed on to the job. Options come before COMMAND; `--` ends them.

  --nproc-per-node N       processes per node (default 1)
  --num_processes N        processes over all nodes (Accelerate's spelling)
  --nnodes N               nodes (--num_machines); more than one needs --hostfile or SLURM
  --node-rank N            must be 0 (--machine_rank): one launch starts every node's ranks
  --master-addr HOST       rank 0's host (--main_process_ip; default: the first host)
  --master-port PORT       (--main_process_port; default 29500)
  --hostfile FILE          DeepSpeed hostfile: one 'hostname slots=N' per line; the slots
                           decide the processes per host
  --config_file FILE       Accelerate config YAML: num_processes, num_machines,
                           machine_rank, main_process_ip, main_process_port and
                           deepspeed_config.deepspeed_hostfile, where the flags give none
  --max-restarts N         when the job fails, run it again up to N times; a
                           `zerotrain train` command gets `--resume auto` (default 0)
  --dry-run                print the command that would run, and exit

example:
  zerotrain launch --config_file accelerate.yaml --num_processes 8 -- zerotrain train run.yaml
)";

int run_launch_command(const Args& args) {
  // The rank wrapper that mpirun / srun start: `zerotrain launch --rank-env -- CMD...`.
  if (!args.empty() && args[0] == "--rank-env") {
    const size_t first = args.size() > 1 && args[1] == "--" ? 2 : 1;
    exec_as_rank({args.begin() + static_cast<std::ptrdiff_t>(first), args.end()});
  }

  LaunchOptions o;
  int max_restarts = 0;
  bool dry_run = false;
  ArgParser parser("launch");
  std::set<std::string> value_flags;  // to tell a flag's value from the command's first word
  const auto value = [&](std::initializer_list<const char*> names, std::function<void(const std::string&)> set) {
    for (const char* name : names) {
      parser.value(name, set);
      value_flags.insert(name);
    }
  };
  const auto number = [](const std::string& flag, const std::string& text, int64_t min, int64_t max) {
    const int64_t n = parse_int(flag, text);
    if (n < min || n > max) ZT_THROW_INPUT(flag, " must be in ", min, "..", max, ", got ", text);
    return static_cast<int>(n);
  };
  constexpr int64_t kMaxProcs = 1 << 20;
  value({"--nproc-per-node", "--nproc_per_node"},
        [&](const std::string& v) { o.nproc_per_node = number("--nproc-per-node", v, 1, kMaxProcs); });
  value({"--num_processes", "--num-processes"},
        [&](const std::string& v) { o.num_processes = number("--num_processes", v, 1, kMaxProcs); });
  value({"--nnodes", "--num_machines", "--num-machines"},
        [&](const std::string& v) { o.nnodes = number("--nnodes", v, 1, kMaxProcs); });
  value({"--node-rank", "--node_rank", "--machine_rank", "--machine-rank"},
        [&](const std::string& v) { o.node_rank = number("--node-rank", v, 0, kMaxProcs); });
  value({"--master-addr", "--master_addr", "--main_process_ip", "--main-process-ip"},
        [&](const std::string& v) { o.master_addr = v; });
  value({"--master-port", "--master_port", "--main_process_port", "--main-process-port"},
        [&](const std::string& v) { o.master_port = number("--master-port", v, 1, 65535); });
  value({"--hostfile"}, [&](const std::string& v) { o.hostfile = v; });
  value({"--config_file", "--config-file"}, [&](const std::string& v) { o.config_file = v; });
  value({"--max-restarts", "--max_restarts"},
        [&](const std::string& v) { max_restarts = number("--max-restarts", v, 0, 1000000); });
  parser.flag("--dry-run", [&] { dry_run = true; });

  // Options end at `--` or at the first word that is neither an option nor an option's value:
  // the command and its own options follow, untouched.
  Args options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.rfind("-", 0) != 0) {
      o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(a == "--" ? i + 1 : i), args.end());
      break;
    }
    options.push_back(a);
    if (a.find('=') == std::string::npos && value_flags.count(a) && i + 1 < args.size()) options.push_back(args[++i]);
  }
  parser.parse(options);

  const LaunchPlan plan = build_launch_plan(o, LaunchContext::current());
  for (const auto& note : plan.notes) std::fprintf(stderr, "zerotrain launch: note: %s\n", note.c_str());
  if (dry_run) {
    std::printf("%s\n", format_plan(plan).c_str());
    return 0;
  }
  std::fflush(stdout);
  return run_launch(plan, max_restarts);
}

const Registrar registrar{
    {"launch", "run a command on every rank of a job (mpirun / srun), torchrun-style", run_launch_command, kHelp}};

}  // namespace
}  // namespace zt::cli
