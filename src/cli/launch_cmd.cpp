// zerotrain launch: start a command on every rank of a job (mpirun, srun, or directly),
// with torchrun / Accelerate / DeepSpeed launch flags. The work is in cli/launcher.h.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

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
passed on to the job. Options come before COMMAND; `--` ends them. torchrun's, DeepSpeed's
and Accelerate's spellings are taken (docs/launching.md has the table).

  --nproc-per-node N       processes per node (default 1); gpu: one per GPU, cpu: one per
                           CPU, auto: gpu when CUDA sees one (--num_gpus without a hostfile)
  --num_processes N        processes over all nodes (Accelerate's spelling)
  --nnodes N               nodes (--num_machines); more than one needs --hostfile or SLURM
  --node-rank N            must be 0 (--machine_rank): one launch starts every node's ranks
  --master-addr HOST       rank 0's host (--main_process_ip; default: the first host)
  --master-port PORT       (--main_process_port; default 29500)
  --standalone             this node only: rank 0 on 127.0.0.1 at a free port (torchrun)
  --rdzv_endpoint H[:P]    rank 0's host and port; --rdzv_backend c10d or static
  --hostfile FILE          DeepSpeed hostfile: one 'hostname slots=N' per line; the slots
                           decide the processes per host (-H, --deepspeed_hostfile)
  --include H[:G,..][@..]  DeepSpeed's choice of hosts and GPUs (localhost:0,1 without a
                           hostfile), one rank per GPU, each node's ranks seeing only its
                           GPUs (CUDA_VISIBLE_DEVICES); --exclude the opposite
  --num_gpus N, --num_nodes N  the first N GPUs of each host / the first N hosts
  --gpu_ids 0,1            the GPUs every node's ranks see (Accelerate)
  --multi_gpu              one process per GPU when no count is given (Accelerate)
  --config_file FILE       Accelerate config YAML: num_processes, num_machines,
                           machine_rank, main_process_ip, main_process_port, gpu_ids and
                           deepspeed_config.deepspeed_hostfile, where the flags give none;
                           a `zerotrain train` command gets --config_file FILE too
  --mixed_precision, --use_deepspeed, --zero_stage, --gradient_accumulation_steps,
  --offload_optimizer_device, --offload_param_device, --gradient_clipping,
  --deepspeed_config_file, --cpu
                           Accelerate's training settings: passed on to a `zerotrain train`
                           command as its own options (an error for other commands)
  --num_cpu_threads_per_process N   CPU threads of every rank (ZT_NUM_THREADS)
  --max-restarts N         when the job fails, run it again up to N times; a
                           `zerotrain train` command gets `--resume auto` (default 0)
  --dry-run                print the command that would run, and exit

examples:
  zerotrain launch --config_file accelerate.yaml --num_processes 8 -- zerotrain train run.yaml
  zerotrain launch --include localhost:0,1 -- zerotrain train run.yaml --deepspeed ds.json
  zerotrain launch --standalone --nproc_per_node gpu -- zerotrain train run.yaml
  zerotrain launch --multi_gpu --mixed_precision bf16 --use_deepspeed --zero_stage 2 -- zerotrain train run.yaml
)";

enum class Arity { Switch, Value };

// torchrun's, DeepSpeed's and Accelerate's launch options that mean something zerotrain
// does not do: refused by name with the way to get what they are for, never ignored.
struct RefusedOption {
  std::vector<std::string> spellings;
  Arity arity;
  const char* fix;
};

const std::vector<RefusedOption>& refused_options() {
  static const std::vector<RefusedOption> table = {
      {{"--rdzv_conf", "--rdzv-conf"},
       Arity::Value,
       "zerotrain's ranks meet through mpirun or srun, with no rendezvous store to configure; leave it out (the "
       "collectives' timeout is ZT_COLLECTIVE_TIMEOUT_S)"},
      {{"--module", "-m"},
       Arity::Switch,
       "the command after the options runs as written; put `python -m MODULE ...` after --"},
      {{"--log_dir", "--log-dir", "--tee", "--redirects", "-r", "-t"},
       Arity::Value,
       "every rank's output comes to the launcher's stdout and stderr; redirect those (2>&1 | tee run.log)"},
      {{"--launcher"},
       Arity::Value,
       "zerotrain launch starts the ranks with mpirun, or srun inside a SLURM allocation, by itself; leave it out"},
      {{"--launcher_args", "--launcher-args"},
       Arity::Value,
       "zerotrain launch builds the mpirun / srun command itself; pass options to mpirun through OMPI_MCA_* "
       "variables, or run mpirun yourself (docs/launching.md#plain-mpirun-and-srun)"},
      {{"--ssh_port", "--ssh-port"},
       Arity::Value,
       "mpirun reaches the hosts with its own ssh settings; set OMPI_MCA_plm_rsh_args='-p PORT' instead"},
      {{"--elastic_training", "--elastic-training"},
       Arity::Switch,
       "elastic jobs are not supported (one launch starts a fixed set of ranks); give fixed counts and "
       "--max-restarts N to recover from failures"},
      {{"--min_elastic_nodes", "--max_elastic_nodes"},
       Arity::Value,
       "elastic jobs are not supported (one launch starts a fixed set of ranks); give a fixed --num_nodes"},
      {{"--autotuning"}, Arity::Value, "DeepSpeed's autotuner is not part of zerotrain; leave it out"},
      {{"--bind_cores_to_rank", "--bind-cores-to-rank"},
       Arity::Switch,
       "with ZeRO-Offload every rank binds to its own cores already (ZT_CPU_BIND=auto); otherwise bind with "
       "mpirun yourself"},
      {{"--use_fsdp", "--use-fsdp"},
       Arity::Switch,
       "FSDP's sharding is ZeRO here: use --use_deepspeed --zero_stage 3 (FULL_SHARD) or --zero_stage 2 "
       "(SHARD_GRAD_OP), or an Accelerate YAML with distributed_type: FSDP"},
      {{"--use_megatron_lm", "--use-megatron-lm"},
       Arity::Switch,
       "Megatron-LM is not supported; use --use_deepspeed with a --zero_stage"},
      {{"--tpu"}, Arity::Switch, "TPUs are not supported; zerotrain runs on NVIDIA GPUs and CPUs"},
  };
  return table;
}

int run_launch_command(const Args& args) {
  // The rank wrapper that mpirun / srun start: `zerotrain launch --rank-env [--node-gpus L] -- CMD...`.
  if (!args.empty() && args[0] == "--rank-env") {
    size_t first = 1;
    std::string node_gpus;
    if (args.size() > 2 && args[1] == "--node-gpus") {
      node_gpus = args[2];
      first = 3;
    }
    if (first < args.size() && args[first] == "--") ++first;
    exec_as_rank({args.begin() + static_cast<std::ptrdiff_t>(first), args.end()}, node_gpus);
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
  // torchrun's
  value({"--nproc-per-node", "--nproc_per_node"}, [&](const std::string& v) {
    o.nproc_word = v == "gpu"    ? ProcessesPerNode::Gpu
                   : v == "cpu"  ? ProcessesPerNode::Cpu
                   : v == "auto" ? ProcessesPerNode::Auto
                                 : ProcessesPerNode::Number;
    if (o.nproc_word == ProcessesPerNode::Number) o.nproc_per_node = number("--nproc-per-node", v, 1, kMaxProcs);
  });
  value({"--num_processes", "--num-processes"},
        [&](const std::string& v) { o.num_processes = number("--num_processes", v, 1, kMaxProcs); });
  value({"--nnodes", "--num_machines", "--num-machines"}, [&](const std::string& v) {
    // torchrun's elastic MIN:MAX: a fixed count only.
    const size_t colon = v.find(':');
    if (colon != std::string::npos && v.substr(0, colon) != v.substr(colon + 1))
      ZT_THROW_INPUT("--nnodes ", v,
                     ": an elastic range of nodes is not supported (one launch starts a fixed set of "
                     "ranks); give one number, e.g. --nnodes ",
                     v.substr(colon + 1));
    o.nnodes = number("--nnodes", v.substr(0, colon), 1, kMaxProcs);
  });
  value({"--node-rank", "--node_rank", "--machine_rank", "--machine-rank"},
        [&](const std::string& v) { o.node_rank = number("--node-rank", v, 0, kMaxProcs); });
  value({"--master-addr", "--master_addr", "--main_process_ip", "--main-process-ip"},
        [&](const std::string& v) { o.master_addr = v; });
  value({"--master-port", "--master_port", "--main_process_port", "--main-process-port"},
        [&](const std::string& v) { o.master_port = number("--master-port", v, 1, 65535); });
  value({"--hostfile", "-H", "--deepspeed_hostfile", "--deepspeed-hostfile"},
        [&](const std::string& v) { o.hostfile = v; });
  value({"--config_file", "--config-file"}, [&](const std::string& v) { o.config_file = v; });
  value({"--max-restarts", "--max_restarts"},
        [&](const std::string& v) { max_restarts = number("--max-restarts", v, 0, 1000000); });
  parser.flag("--dry-run", [&] { dry_run = true; });
  parser.flag("--standalone", [&] { o.standalone = true; });
  value({"--rdzv_backend", "--rdzv-backend"}, [&](const std::string& v) { o.rdzv_backend = v; });
  value({"--rdzv_endpoint", "--rdzv-endpoint"}, [&](const std::string& v) { o.rdzv_endpoint = v; });
  // One launch is one job: its rendezvous id names nothing else.
  value({"--rdzv_id", "--rdzv-id"}, [](const std::string&) {});
  // DeepSpeed's
  value({"--num_gpus", "--num-gpus"},
        [&](const std::string& v) { o.gpus.num_gpus = number("--num_gpus", v, 1, kMaxProcs); });
  value({"--num_nodes", "--num-nodes"},
        [&](const std::string& v) { o.gpus.num_nodes = number("--num_nodes", v, 1, kMaxProcs); });
  value({"--include", "-i"}, [&](const std::string& v) { o.gpus.include = v; });
  value({"--exclude", "-e"}, [&](const std::string& v) { o.gpus.exclude = v; });
  // The rank's command gets no --local_rank argument and is never prefixed with python.
  parser.flag("--no_local_rank", [] {});
  parser.flag("--no_python", [] {});
  // Accelerate's
  parser.flag("--multi_gpu", [&] { o.multi_gpu = true; });
  value({"--gpu_ids", "--gpu-ids"}, [&](const std::string& v) { o.gpu_ids = v; });
  value({"--num_cpu_threads_per_process", "--num-cpu-threads-per-process"},
        [&](const std::string& v) { o.threads_per_process = number("--num_cpu_threads_per_process", v, 1, 1 << 16); });
  value({"--dynamo_backend", "--dynamo-backend"}, [](const std::string& v) {
    if (v != "no" && v != "NO")
      ZT_THROW_INPUT("--dynamo_backend ", v, ": zerotrain compiles its kernels ahead of time; leave it out (or no)");
  });
  AccelerateTrainingFlags& t = o.training;
  parser.flag("--use_deepspeed", [&] { t.use_deepspeed = true; });
  parser.flag("--cpu", [&] { t.use_cpu = true; });
  value({"--mixed_precision", "--mixed-precision"}, [&](const std::string& v) { t.mixed_precision = v; });
  value({"--deepspeed_config_file", "--deepspeed-config-file"},
        [&](const std::string& v) { t.deepspeed_config_file = v; });
  value({"--zero_stage", "--zero-stage"},
        [&](const std::string& v) { t.zero_stage = number("--zero_stage", v, 0, 3); });
  value({"--gradient_accumulation_steps", "--gradient-accumulation-steps"}, [&](const std::string& v) {
    t.gradient_accumulation_steps = number("--gradient_accumulation_steps", v, 1, 1 << 30);
  });
  value({"--gradient_clipping", "--gradient-clipping"}, [&](const std::string& v) { t.gradient_clipping = v; });
  value({"--offload_optimizer_device", "--offload-optimizer-device"},
        [&](const std::string& v) { t.offload_optimizer_device = v; });
  value({"--offload_param_device", "--offload-param-device"},
        [&](const std::string& v) { t.offload_param_device = v; });
  // The launchers' options that zerotrain cannot honour: each named, with what to do instead.
  for (const RefusedOption& r : refused_options()) {
    const std::string name = r.spellings.front(), fix = r.fix;
    for (const std::string& spelling : r.spellings) {
      if (r.arity == Arity::Value)
        value({spelling.c_str()}, [name, fix](const std::string&) { ZT_THROW_INPUT(name, ": ", fix); });
      else
        parser.flag(spelling, [name, fix] { ZT_THROW_INPUT(name, ": ", fix); });
    }
  }

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
  check_training_flag_values(o.training);

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
