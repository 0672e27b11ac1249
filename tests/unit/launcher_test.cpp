// zerotrain launch, the library part: DeepSpeed hostfiles, and the command built from
// torchrun / Accelerate settings (mpirun, srun, direct), their mismatches, restarts.
// mpirun and srun are stand-in scripts on a test PATH, so nothing here depends on the machine.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "cli/launcher.h"

namespace zt::cli {
namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

using Words = std::vector<std::string>;

// A scratch dir with bin/mpirun and bin/srun stand-ins, and a context whose PATH is bin/.
class LaunchPlanTest : public ::testing::Test {
 protected:
  LaunchPlanTest() : dir_(zt::testing::build_temp_path("launcher_")) {
    std::filesystem::create_directories(dir_.path() / "bin");
    for (const char* tool : {"mpirun", "srun"}) {
      const std::string path = dir_.write("bin/" + std::string(tool), "#!/bin/sh\nexit 0\n");
      ::chmod(path.c_str(), 0755);
    }
    context_.env = {{"PATH", bin()}};
    context_.self_exe = "/opt/zt/zerotrain";
    context_.cpu_count = 8;
  }
  std::string bin() const { return (dir_.path() / "bin").string(); }
  std::string mpirun() const { return bin() + "/mpirun"; }
  LaunchOptions options(Words command = {"zerotrain", "train", "run.yaml"}) const {
    LaunchOptions o;
    o.command = std::move(command);
    return o;
  }
  LaunchPlan plan(const LaunchOptions& o) const { return build_launch_plan(o, context_); }
  // The BadInput message of building the plan.
  std::string plan_error(const LaunchOptions& o) const {
    try {
      build_launch_plan(o, context_);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_EQ(e.exit_code(), 2);
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  zt::testing::TempDir dir_;
  LaunchContext context_;
};

std::string export_of(const LaunchPlan& p, const std::string& name) {
  for (const auto& kv : p.exports)
    if (kv.first == name) return kv.second;
  return "<unset>";
}

// The words of `argv` from `first` on, `count` of them (for checking one option group).
Words slice(const Words& argv, const std::string& first, size_t count) {
  const auto it = std::find(argv.begin(), argv.end(), first);
  if (it == argv.end() || static_cast<size_t>(argv.end() - it) < count) return {};
  return Words(it, it + static_cast<std::ptrdiff_t>(count));
}

Words tail(const Words& argv, size_t count) {
  return Words(argv.end() - static_cast<std::ptrdiff_t>(std::min(count, argv.size())), argv.end());
}

std::string hostfile_error(const std::string& text) {
  try {
    parse_hostfile_text(text, "hosts.txt");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << text;
  return "";
}

TEST(Hostfile, ReadsDeepSpeedFormatWithCommentsAndBlankLines) {
  const auto hosts =
      parse_hostfile_text("# the cluster\n\nworker-1 slots=4\r\n  worker-2   slots=2  # half a node\n", "hosts.txt");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "worker-1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "worker-2");
  EXPECT_EQ(hosts[1].slots, 2);
}

TEST(Hostfile, BadLinesNameFileAndLine) {
  EXPECT_HAS(hostfile_error("a slots=2\nb\n"), "hosts.txt:2: expected 'hostname slots=N'");
  EXPECT_HAS(hostfile_error("a slots=2 extra\n"), "hosts.txt:1:");
  EXPECT_HAS(hostfile_error("a gpus=2\n"), "hosts.txt:1:");
  EXPECT_HAS(hostfile_error("a slots=0\n"), "hosts.txt:1: slots=0");
  EXPECT_HAS(hostfile_error("a slots=two\n"), "hosts.txt:1: slots=two");
  EXPECT_HAS(hostfile_error("a slots=2\n\na slots=2\n"), "hosts.txt:3: host a is listed twice");
  EXPECT_HAS(hostfile_error("# nothing\n\n"), "hosts.txt: the hostfile lists no hosts");
}

TEST(Hostfile, MissingFileIsBadInput) {
  try {
    parse_hostfile("/nonexistent/hostfile");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_HAS(e.what(), "/nonexistent/hostfile: cannot open");
  }
  // Read by the bounded config reader: a directory or a device is not a hostfile.
  for (const auto& [path, part] : {std::pair<std::string, std::string>{"/tmp", "/tmp: is a directory"},
                                   {"/dev/zero", "/dev/zero: not a regular file"}}) {
    try {
      parse_hostfile(path);
      ADD_FAILURE() << path << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_HAS(e.what(), part);
    }
  }
}

TEST_F(LaunchPlanTest, NprocPerNodeRunsMpirunOnThisHost) {
  LaunchOptions o = options();
  o.nproc_per_node = 4;
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.runner, Runner::Mpirun);
  EXPECT_EQ(p.world_size, 4);
  const Words argv = p.argv();
  EXPECT_EQ(slice(argv, mpirun(), 3), (Words{mpirun(), "-np", "4"}));
  EXPECT_EQ(slice(argv, "--host", 2), (Words{"--host", "localhost:4"}));
  EXPECT_EQ(slice(argv, "--bind-to", 2), (Words{"--bind-to", "none"}));
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--allow-run-as-root"), 0);
  EXPECT_EQ(slice(argv, "MASTER_ADDR=127.0.0.1", 3), (Words{"MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=29500"}));
  EXPECT_EQ(tail(argv, 7),
            (Words{"/opt/zt/zerotrain", "launch", "--rank-env", "--", "zerotrain", "train", "run.yaml"}));
  // 8 cores shared by 4 ranks.
  EXPECT_EQ(export_of(p, "ZT_NUM_THREADS"), "2");
  EXPECT_EQ(export_of(p, "ZT_RESTART_COUNT"), "0");
  EXPECT_TRUE(p.process_env().empty());
}

TEST_F(LaunchPlanTest, RootAddsAllowRunAsRootAndForwardsZtVariables) {
  context_.is_root = true;
  context_.env.push_back({"ZT_COLLECTIVE_TIMEOUT_S", "60"});
  context_.env.push_back({"NCCL_DEBUG", "INFO"});
  context_.env.push_back({"OMP_NUM_THREADS", "3"});
  context_.env.push_back({"HOME", "/root"});
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  const LaunchPlan p = plan(o);
  const Words argv = p.argv();
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--allow-run-as-root"), 1);
  EXPECT_EQ(p.forwarded, (Words{"NCCL_DEBUG", "OMP_NUM_THREADS", "ZT_COLLECTIVE_TIMEOUT_S"}));
  EXPECT_EQ(slice(argv, "ZT_COLLECTIVE_TIMEOUT_S", 1).size(), 1u);
  // The user chose the threads (OMP_NUM_THREADS): no default of ours.
  EXPECT_EQ(export_of(p, "ZT_NUM_THREADS"), "<unset>");
}

TEST_F(LaunchPlanTest, AccelerateTotalOverMachinesWithHostfile) {
  const std::string hostfile = dir_.write("hostfile", "node-a slots=4\nnode-b slots=4\n");
  LaunchOptions o = options();
  o.num_processes = 8;  // accelerate's --num_processes: over all machines
  o.nnodes = 2;         // --num_machines
  o.master_port = 29600;
  o.hostfile = hostfile;
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.runner, Runner::Mpirun);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.nnodes, 2);
  const Words argv = p.argv();
  EXPECT_EQ(slice(argv, "--host", 2), (Words{"--host", "node-a:4,node-b:4"}));
  EXPECT_EQ(slice(argv, "--map-by", 2), (Words{"--map-by", "slot"}));
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "node-a");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29600");
}

TEST_F(LaunchPlanTest, HostfileAloneDecidesTheWorld) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=1\nb slots=3\n");
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(slice(p.argv(), "-np", 2), (Words{"-np", "4"}));
  EXPECT_EQ(export_of(p, "ZT_NUM_THREADS"), "2");  // 8 cores / 3 ranks on the fullest host
}

TEST_F(LaunchPlanTest, ConfigFileGivesLaunchValuesAndFlagsOverrideThem) {
  const std::string yaml = dir_.write("accelerate.yaml",
                                      "compute_environment: LOCAL_MACHINE\n"
                                      "distributed_type: DEEPSPEED\n"
                                      "deepspeed_config:\n  zero_stage: 2\n"
                                      "num_processes: 4\nnum_machines: 1\nmachine_rank: 0\n"
                                      "main_process_ip: 10.0.0.7\nmain_process_port: 29555\n");
  LaunchOptions o = options();
  o.config_file = yaml;
  LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "10.0.0.7");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29555");
  EXPECT_TRUE(p.notes.empty());

  o.num_processes = 2;
  o.master_port = 29500;
  p = plan(o);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29500");
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "10.0.0.7");

  // A per-node count on the command line replaces the YAML's total.
  o.num_processes = 0;
  o.nproc_per_node = 3;
  EXPECT_EQ(plan(o).world_size, 3);
}

TEST_F(LaunchPlanTest, ConfigFileErrorsAreTheAccelerateLoadersOnes) {
  LaunchOptions o = options();
  o.config_file = dir_.write("bad.yaml", "distributed_type: DEEPSPEED\nnum_processes: 0\n");
  EXPECT_HAS(plan_error(o), "bad.yaml: num_processes: must be at least 1");
}

TEST_F(LaunchPlanTest, DeepSpeedConfigAsConfigFileIsNotAnError) {
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  o.config_file = dir_.write("ds_config.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})");
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 2);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_HAS(p.notes[0], "ds_config.json has no Accelerate keys");
  o.config_file = dir_.write("ds_config.yaml", "train_micro_batch_size_per_gpu: 4\nbf16:\n  enabled: true\n");
  EXPECT_EQ(plan(o).world_size, 2);
}

TEST_F(LaunchPlanTest, HostfileSlotsNotMatchingNumProcessesIsBadInput) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\nb slots=2\n");
  o.num_processes = 8;
  const std::string e = plan_error(o);
  EXPECT_HAS(e, o.hostfile + ": the slots add up to 4 processes (a slots=2, b slots=2)");
  EXPECT_HAS(e, "--num_processes asks for 8");
  EXPECT_HAS(e, "make the slots add up to 8, or set --num_processes to 4");
}

TEST_F(LaunchPlanTest, HostfileHostsNotMatchingNnodesIsBadInput) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\nb slots=2\nc slots=2\n");
  o.nnodes = 2;
  const std::string e = plan_error(o);
  EXPECT_HAS(e, o.hostfile + ": lists 3 host(s)");
  EXPECT_HAS(e, "--nnodes/--num_machines is 2");
}

TEST_F(LaunchPlanTest, HostfileSlotsNotMatchingNprocPerNodeIsBadInput) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=4\nb slots=2\n");
  o.nproc_per_node = 4;
  EXPECT_HAS(plan_error(o), "host b has slots=2 but --nproc-per-node is 4");
}

TEST_F(LaunchPlanTest, ConfigFileCountsAgainstHostfileNameBoth) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\n");
  o.config_file = dir_.write("acc.yaml", "distributed_type: MULTI_CPU\nnum_processes: 4\nnum_machines: 2\n");
  const std::string e = plan_error(o);
  EXPECT_HAS(e, o.hostfile + ": lists 1 host(s)");
  EXPECT_HAS(e, "acc.yaml: num_machines is 2");
}

TEST_F(LaunchPlanTest, InconsistentCountsWithoutHostfileAreBadInput) {
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  o.num_processes = 3;
  EXPECT_HAS(plan_error(o), "--num_processes is 3 but --nproc-per-node 2 x 1 node(s)");

  o = options();
  o.nnodes = 2;
  o.nproc_per_node = 2;
  EXPECT_HAS(plan_error(o), "2 nodes need a --hostfile");

  o = options();
  o.nnodes = 2;
  o.num_processes = 3;
  EXPECT_HAS(plan_error(o), "3 processes do not split evenly over 2 node(s)");

  o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\nb slots=2\n");
  o.node_rank = 1;
  EXPECT_HAS(plan_error(o), "run it once, on the first node");
}

TEST_F(LaunchPlanTest, NoCommandIsBadInput) { EXPECT_HAS(plan_error(options({})), "no command to run"); }

TEST_F(LaunchPlanTest, MissingMpirunSaysWhatToInstall) {
  context_.env = {{"PATH", (dir_.path() / "empty").string()}};
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  EXPECT_HAS(plan_error(o), "mpirun is not on PATH");
  EXPECT_HAS(plan_error(o), "openmpi-bin");
}

TEST_F(LaunchPlanTest, InsideSlurmUsesSrunAndTheAllocation) {
  context_.env.push_back({"SLURM_JOB_ID", "1234"});
  context_.env.push_back({"SLURM_JOB_NUM_NODES", "2"});
  context_.env.push_back({"SLURM_NTASKS", "8"});
  context_.env.push_back({"SLURM_JOB_NODELIST", "gpu[03-04]"});
  const LaunchPlan p = plan(options());
  EXPECT_EQ(p.runner, Runner::Srun);
  EXPECT_EQ(p.world_size, 8);
  const Words argv = p.argv();
  EXPECT_EQ(slice(argv, bin() + "/srun", 7),
            (Words{bin() + "/srun", "--ntasks", "8", "--nodes", "2", "--ntasks-per-node", "4"}));
  EXPECT_EQ(
      slice(argv, "--export=ALL,MASTER_ADDR=gpu03,MASTER_PORT=29500,ZT_NUM_THREADS=2,ZT_RESTART_COUNT=0", 1).size(),
      1u);
  EXPECT_EQ(tail(argv, 7),
            (Words{"/opt/zt/zerotrain", "launch", "--rank-env", "--", "zerotrain", "train", "run.yaml"}));

  // Flags still decide when given.
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  o.nnodes = 1;
  const LaunchPlan q = plan(o);
  EXPECT_EQ(q.world_size, 2);
  EXPECT_EQ(slice(q.argv(), "--nodes", 2), (Words{"--nodes", "1"}));
}

TEST_F(LaunchPlanTest, SlurmWithoutSrunOnPathIsNotSlurm) {
  context_.env = {{"PATH", (dir_.path() / "empty").string()}, {"SLURM_JOB_ID", "1"}};
  const LaunchPlan p = plan(options());
  EXPECT_EQ(p.runner, Runner::Direct);
}

TEST_F(LaunchPlanTest, SingleProcessRunsTheCommandDirectly) {
  const LaunchPlan p = plan(options({"sh", "-c", "echo $RANK"}));
  EXPECT_EQ(p.runner, Runner::Direct);
  EXPECT_EQ(p.argv(), (Words{"sh", "-c", "echo $RANK"}));
  const auto env = p.process_env();
  const auto has = [&](const std::string& k, const std::string& v) {
    return std::find(env.begin(), env.end(), std::make_pair(k, v)) != env.end();
  };
  EXPECT_TRUE(has("RANK", "0"));
  EXPECT_TRUE(has("LOCAL_RANK", "0"));
  EXPECT_TRUE(has("WORLD_SIZE", "1"));
  EXPECT_TRUE(has("LOCAL_WORLD_SIZE", "1"));
  EXPECT_TRUE(has("ZT_RESTART_COUNT", "0"));
  EXPECT_EQ(format_plan(p),
            "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "
            "ZT_RESTART_COUNT=0 sh -c 'echo $RANK'");
}

TEST_F(LaunchPlanTest, RestartResumesZerotrainTrainFromTheLatestCheckpoint) {
  LaunchOptions o = options({"/opt/zt/zerotrain", "train", "run.yaml"});
  o.nproc_per_node = 2;
  const LaunchPlan restart = plan_for_restart(plan(o), 2);
  EXPECT_EQ(tail(restart.argv(), 5), (Words{"/opt/zt/zerotrain", "train", "run.yaml", "--resume", "auto"}));
  EXPECT_EQ(export_of(restart, "ZT_RESTART_COUNT"), "2");
  EXPECT_EQ(slice(restart.argv(), "ZT_RESTART_COUNT=2", 1).size(), 1u);

  // Its own --resume is kept; other commands are rerun as they are.
  EXPECT_EQ(plan_for_restart(plan(options({"zerotrain", "train", "--resume=latest"})), 1).command,
            (Words{"zerotrain", "train", "--resume=latest"}));
  EXPECT_EQ(plan_for_restart(plan(options({"python", "train.py"})), 1).command, (Words{"python", "train.py"}));
}

// ---------------------------------------------------------------------------------------
// DeepSpeed's --include / --exclude / --num_nodes / --num_gpus, Accelerate's gpu_ids

TEST_F(LaunchPlanTest, IncludeChoosesGpusOfThisMachine) {
  context_.gpu_count = [] { return 4; };
  LaunchOptions o = options();
  o.gpus.include = "localhost:1,3";
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.runner, Runner::Mpirun);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(slice(p.argv(), "--host", 2), (Words{"--host", "localhost:2"}));
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "127.0.0.1");
  // One GPU: the command itself, seeing that GPU.
  o.gpus.include = "localhost:2";
  const LaunchPlan one = plan(o);
  EXPECT_EQ(one.runner, Runner::Direct);
  const auto env = one.process_env();
  EXPECT_NE(std::find(env.begin(), env.end(), std::make_pair(std::string("CUDA_VISIBLE_DEVICES"), std::string("2"))),
            env.end());
}

TEST_F(LaunchPlanTest, IncludeWithoutGpusTakesTheNumbersAsGiven) {
  // A CPU machine: nothing to check the numbers against; they count the ranks.
  LaunchOptions o = options();
  o.gpus.include = "localhost:0,1";
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "0,1");
  o.gpus.include = "localhost";
  EXPECT_HAS(plan_error(o), "--include localhost: name its GPUs (localhost:0,1)");
  o.gpus.include.clear();
  o.gpus.exclude = "localhost:0";
  EXPECT_HAS(plan_error(o), "--exclude: CUDA sees no GPU");
}

TEST_F(LaunchPlanTest, ExcludeOverHostfileGivesEachNodeItsOwnGpus) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=4\nb slots=4\nc slots=2\n");
  o.gpus.exclude = "a:0,1@b:3@c";
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 5);
  EXPECT_EQ(p.nnodes, 2);
  const Words argv = p.argv();
  EXPECT_EQ(slice(argv, "--host", 2), (Words{"--host", "a:2,b:3"}));
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "a");
  // Different lists per node: the rank wrapper sets each node's.
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_EQ(slice(argv, "/opt/zt/zerotrain", 6),
            (Words{"/opt/zt/zerotrain", "launch", "--rank-env", "--node-gpus", "2,3;0,1,2", "--"}));
}

TEST_F(LaunchPlanTest, IncludeKeepsTheHostfilesOrder) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\nb slots=2\n");
  o.gpus.include = "b@a:1";
  const LaunchPlan p = plan(o);
  EXPECT_EQ(slice(p.argv(), "--host", 2), (Words{"--host", "a:1,b:2"}));
  EXPECT_EQ(slice(p.argv(), "--node-gpus", 2), (Words{"--node-gpus", "1;0,1"}));
}

TEST_F(LaunchPlanTest, NumNodesAndNumGpusTakeTheFirstHostsAndGpus) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=4\nb slots=4\nc slots=4\n");
  o.gpus.num_nodes = 2;
  o.gpus.num_gpus = 2;
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(slice(p.argv(), "--host", 2), (Words{"--host", "a:2,b:2"}));
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "0,1");
  // Without a hostfile --num_gpus is the processes of this machine, --num_nodes its nodes.
  LaunchOptions local = options();
  local.gpus.num_gpus = 3;
  EXPECT_EQ(plan(local).world_size, 3);
  EXPECT_EQ(export_of(plan(local), "CUDA_VISIBLE_DEVICES"), "0,1,2");
  local.gpus.num_nodes = 1;
  EXPECT_EQ(plan(local).nnodes, 1);
  local.gpus.num_nodes = 2;
  EXPECT_HAS(plan_error(local), "--num_nodes 2: this machine has 1 node(s)");
}

TEST_F(LaunchPlanTest, SelectionMistakesNameTheFlagAndTheFix) {
  context_.gpu_count = [] { return 2; };
  LaunchOptions o = options();
  o.gpus.include = "localhost:0";
  o.gpus.exclude = "localhost:1";
  EXPECT_HAS(plan_error(o), "--include and --exclude together");
  o = options();
  o.gpus.include = "localhost:0";
  o.gpus.num_gpus = 1;
  EXPECT_HAS(plan_error(o), "--num_gpus with --include");
  o = options();
  o.gpus.include = "localhost:2";
  EXPECT_HAS(plan_error(o), "--include: host localhost has no GPU 2 in this machine (CUDA sees 2 GPUs) (it has 0,1)");
  o.gpus.include = "worker-9:0";
  EXPECT_HAS(plan_error(o), "--include: host worker-9 is not in this machine");
  o.gpus.include = "localhost:0,x";
  EXPECT_HAS(plan_error(o), "is not a list of GPU numbers");
  o = options();
  o.gpus.exclude = "localhost";
  EXPECT_HAS(plan_error(o), "leaves no GPU of this machine");
  o = options();
  o.gpus.num_gpus = 3;
  EXPECT_HAS(plan_error(o), "--num_gpus 3: host localhost has 2 GPU(s)");
  o = options();
  o.gpus.include = "localhost:0,1";
  o.num_processes = 4;
  EXPECT_HAS(plan_error(o), "--num_processes asks for 4 processes but --include localhost:0,1 chooses 2 GPU(s)");
  o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\n");
  o.gpus.include = "b";
  EXPECT_HAS(plan_error(o), "host b is not in hostfile " + o.hostfile + " (a); name one of those, or add it");
}

TEST(LaunchSelection, RankWrapperFindsItsNodesGpus) {
  EXPECT_EQ(gpus_of_rank("0,1;2,3,4", 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(gpus_of_rank("0,1;2,3,4", 1), (std::vector<int>{0, 1}));
  EXPECT_EQ(gpus_of_rank("0,1;2,3,4", 2), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(gpus_of_rank("0,1;2,3,4", 4), (std::vector<int>{2, 3, 4}));
  EXPECT_THROW(gpus_of_rank("0,1;2,3,4", 5), Error);
  EXPECT_EQ(parse_gpu_list("3,1", "x"), (std::vector<int>{1, 3}));
  EXPECT_THROW(parse_gpu_list("1,1", "x"), Error);
  EXPECT_THROW(parse_gpu_list("", "x"), Error);
  EXPECT_THROW(parse_gpu_list("-1", "x"), Error);
}

TEST_F(LaunchPlanTest, GpuIdsAreWhatEveryRankSees) {
  LaunchOptions o = options();
  o.gpu_ids = "1,2";
  o.nproc_per_node = 2;
  EXPECT_EQ(export_of(plan(o), "CUDA_VISIBLE_DEVICES"), "1,2");
  o.nproc_per_node = 3;
  EXPECT_HAS(plan_error(o), "--gpu_ids lists 2 GPU(s) (1,2) but 3 processes run per node");
  o.nproc_per_node = 2;
  o.gpus.num_gpus = 2;
  EXPECT_HAS(plan_error(o), "--gpu_ids and DeepSpeed's --include/--exclude/--num_gpus both choose GPUs");
  // From the YAML; `all` chooses nothing.
  o = options();
  o.config_file = dir_.write("acc.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: 0,3\n");
  EXPECT_EQ(export_of(plan(o), "CUDA_VISIBLE_DEVICES"), "0,3");
  o.config_file = dir_.write("all.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: all\n");
  EXPECT_EQ(export_of(plan(o), "CUDA_VISIBLE_DEVICES"), "<unset>");
}

TEST_F(LaunchPlanTest, ConfigFilesDeepSpeedFiltersChooseTheGpus) {
  LaunchOptions o = options();
  o.hostfile = dir_.write("hostfile", "a slots=2\nb slots=2\n");
  o.config_file = dir_.write("acc.yaml",
                             "distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 4\ndeepspeed_config:\n"
                             "  deepspeed_exclusion_filter: b:1\n");
  LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 3);
  EXPECT_EQ(slice(p.argv(), "--host", 2), (Words{"--host", "a:2,b:1"}));
  // The command line's selection wins.
  o.gpus.include = "a:1";
  o.nnodes = 1;
  p = plan(o);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "1");
}

TEST_F(LaunchPlanTest, ChosenGpusReplaceTheShellsWithANote) {
  context_.env.push_back({"CUDA_VISIBLE_DEVICES", "4,5"});
  LaunchOptions o = options();
  o.gpus.include = "localhost:0,1";
  const LaunchPlan p = plan(o);
  EXPECT_EQ(export_of(p, "CUDA_VISIBLE_DEVICES"), "0,1");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_HAS(p.notes[0], "replace CUDA_VISIBLE_DEVICES=4,5 of this shell");
}

// ---------------------------------------------------------------------------------------
// torchrun's --standalone, --rdzv_*, --nproc-per-node gpu|cpu|auto; Accelerate's --multi_gpu

TEST_F(LaunchPlanTest, StandaloneIsThisNodeAtAFreePort) {
  context_.free_port = [] { return 31337; };
  LaunchOptions o = options();
  o.standalone = true;
  o.nproc_per_node = 2;
  LaunchPlan p = plan(o);
  EXPECT_EQ(p.runner, Runner::Mpirun);
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "31337");
  o.master_port = 29700;  // a port given is kept
  EXPECT_EQ(export_of(plan(o), "MASTER_PORT"), "29700");
  // Inside a SLURM allocation too: this node, not srun.
  context_.env.push_back({"SLURM_JOB_ID", "1"});
  context_.env.push_back({"SLURM_NTASKS", "8"});
  EXPECT_EQ(plan(o).runner, Runner::Mpirun);
  EXPECT_EQ(plan(o).world_size, 2);

  o.hostfile = dir_.write("hostfile", "a slots=2\n");
  EXPECT_HAS(plan_error(o), "--standalone runs on this node only, but the hostfile");
  o.hostfile.clear();
  o.nnodes = 2;
  EXPECT_HAS(plan_error(o), "--standalone runs on one node, but --nnodes/--num_machines is 2");
  o.nnodes = 0;
  o.master_port = 0;
  o.rdzv_endpoint = "node-1:29400";
  EXPECT_HAS(plan_error(o), "--standalone meets on this host, but --rdzv_endpoint is node-1:29400");
}

TEST_F(LaunchPlanTest, RendezvousEndpointIsRankZerosAddress) {
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  o.rdzv_backend = "c10d";
  o.rdzv_endpoint = "node-1:29400";
  LaunchPlan p = plan(o);
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "node-1");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29400");
  o.rdzv_endpoint = "[fe80::1]:29401";
  p = plan(o);
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "fe80::1");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29401");
  o.rdzv_endpoint = "node-2";
  o.rdzv_backend = "static";
  p = plan(o);
  EXPECT_EQ(export_of(p, "MASTER_ADDR"), "node-2");
  EXPECT_EQ(export_of(p, "MASTER_PORT"), "29500");

  o.master_addr = "node-3";
  EXPECT_HAS(plan_error(o), "--rdzv_endpoint node-2 and --master-addr node-3 name different hosts");
  o.master_addr.clear();
  o.rdzv_endpoint = "node-2:99999";
  EXPECT_HAS(plan_error(o), "'99999' is not a port");
  o.rdzv_endpoint.clear();
  o.rdzv_backend = "etcd-v2";
  EXPECT_HAS(plan_error(o), "--rdzv_backend etcd-v2: zerotrain's ranks meet through mpirun or srun");
  o.rdzv_backend = "c10";
  EXPECT_HAS(plan_error(o), "--rdzv_backend 'c10' is not one of c10d, static");
}

TEST_F(LaunchPlanTest, NprocPerNodeWordsCountGpusOrCpus) {
  LaunchOptions o = options();
  o.nproc_word = ProcessesPerNode::Gpu;
  EXPECT_HAS(plan_error(o), "--nproc-per-node gpu: CUDA sees no GPU here");
  o.nproc_word = ProcessesPerNode::Auto;
  EXPECT_EQ(plan(o).world_size, 8);  // no GPU: one per CPU
  o.nproc_word = ProcessesPerNode::Cpu;
  EXPECT_EQ(plan(o).world_size, 8);
  context_.gpu_count = [] { return 4; };
  o.nproc_word = ProcessesPerNode::Gpu;
  EXPECT_EQ(plan(o).world_size, 4);
  o.nproc_word = ProcessesPerNode::Auto;
  EXPECT_EQ(plan(o).world_size, 4);
}

TEST_F(LaunchPlanTest, MultiGpuStartsOneProcessPerGpu) {
  LaunchOptions o = options();
  o.multi_gpu = true;
  EXPECT_HAS(plan_error(o), "--multi_gpu: CUDA sees no GPU here");
  context_.gpu_count = [] { return 2; };
  EXPECT_EQ(plan(o).world_size, 2);
  o.gpu_ids = "0,1,2";
  EXPECT_EQ(plan(o).world_size, 3);
  EXPECT_EQ(export_of(plan(o), "CUDA_VISIBLE_DEVICES"), "0,1,2");
  // A count given wins, as Accelerate's num_processes does.
  o.gpu_ids.clear();
  o.config_file = dir_.write("acc.yaml", "distributed_type: MULTI_GPU\nnum_processes: 4\n");
  EXPECT_EQ(plan(o).world_size, 4);
}

TEST_F(LaunchPlanTest, ThreadsPerProcessAreEveryRanksThreads) {
  LaunchOptions o = options();
  o.nproc_per_node = 2;
  o.threads_per_process = 3;
  EXPECT_EQ(export_of(plan(o), "ZT_NUM_THREADS"), "3");
}

// ---------------------------------------------------------------------------------------
// Accelerate's training settings reach a `zerotrain train` command

TEST_F(LaunchPlanTest, ConfigFileReachesTheTrainingCommand) {
  const std::string yaml = dir_.write("acc.yaml",
                                      "distributed_type: DEEPSPEED\nmixed_precision: bf16\n"
                                      "deepspeed_config:\n  zero_stage: 2\nnum_processes: 2\n");
  LaunchOptions o = options({"/opt/zt/zerotrain", "train", "run.yaml"});
  o.config_file = yaml;
  EXPECT_EQ(plan(o).command, (Words{"/opt/zt/zerotrain", "train", "run.yaml", "--config_file", yaml}));
  // The launch decided another count: the training command hears it too.
  o.num_processes = 4;
  EXPECT_EQ(tail(plan(o).command, 4), (Words{"--config_file", yaml, "--num_processes", "4"}));
  // Named already (same file): not twice; another file: an error.
  o.num_processes = 0;
  o.command = {"zerotrain", "train", "run.yaml", "--config_file", yaml};
  EXPECT_EQ(plan(o).command, o.command);
  o.command = {"zerotrain", "train", "run.yaml", "--config_file=other.yaml"};
  EXPECT_HAS(plan_error(o), "and the training command's --config_file other.yaml name different Accelerate configs");
  // Restarts still resume.
  o.command = {"zerotrain", "train", "run.yaml"};
  EXPECT_EQ(tail(plan_for_restart(plan(o), 1).command, 4), (Words{"--config_file", yaml, "--resume", "auto"}));
}

TEST_F(LaunchPlanTest, AccelerateFlagsBecomeTheTrainingCommandsOptions) {
  LaunchOptions o = options();
  o.training.mixed_precision = "bf16";
  o.training.zero_stage = 3;
  o.training.gradient_accumulation_steps = 4;
  o.training.offload_optimizer_device = "cpu";
  o.training.deepspeed_config_file = "ds.json";
  EXPECT_EQ(plan(o).command,
            (Words{"zerotrain", "train", "run.yaml", "--distributed_type", "DEEPSPEED", "--mixed_precision", "bf16",
                   "--deepspeed_config.deepspeed_config_file", "ds.json", "--deepspeed_config.zero_stage", "3",
                   "--deepspeed_config.gradient_accumulation_steps", "4", "--deepspeed_config.offload_optimizer_device",
                   "cpu"}));
  o.training = {};
  o.training.use_deepspeed = true;
  o.training.use_cpu = true;
  EXPECT_EQ(tail(plan(o).command, 4), (Words{"--distributed_type", "DEEPSPEED", "--use_cpu", "true"}));

  // The command's own value: the same is fine, another is an error.
  o.training = {};
  o.training.mixed_precision = "bf16";
  o.command = {"zerotrain", "train", "run.yaml", "--mixed_precision", "bf16"};
  EXPECT_EQ(plan(o).command, o.command);
  o.command = {"zerotrain", "train", "run.yaml", "--mixed_precision=fp16"};
  EXPECT_HAS(plan_error(o),
             "launch --mixed_precision sets mixed_precision to bf16 but the training command says "
             "--mixed_precision fp16");
  o.training = {};
  o.training.deepspeed_config_file = "a.json";
  o.command = {"zerotrain", "train", "run.yaml", "--deepspeed", "b.json"};
  EXPECT_HAS(plan_error(o), "launch --deepspeed_config_file a.json and the training command's --deepspeed b.json");
}

TEST_F(LaunchPlanTest, TrainingSettingsForAnotherCommand) {
  LaunchOptions o = options({"sh", "-c", "zerotrain train run.yaml"});
  o.training.mixed_precision = "bf16";
  o.training.zero_stage = 2;
  EXPECT_HAS(plan_error(o),
             "--mixed_precision bf16 --zero_stage 2: these are training settings, which zerotrain "
             "launch passes to a `zerotrain train` command only, and 'sh' is not one");
  // A YAML's training settings: a note (its launch values still count).
  o.training = {};
  o.config_file = dir_.write("acc.yaml", "distributed_type: DEEPSPEED\nmixed_precision: fp16\nnum_processes: 2\n");
  const LaunchPlan p = plan(o);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(p.command, o.command);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_HAS(p.notes[0],
             "sets distributed_type DEEPSPEED, mixed_precision for training, which reach a `zerotrain train` "
             "command only ('sh' is not one)");
  // Launch values only: nothing to say.
  o.config_file = dir_.write("plain.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n");
  EXPECT_TRUE(plan(o).notes.empty());
}

TEST(LaunchTrainingFlags, ValuesAccelerateRefusesAreBadInput) {
  const auto error_of = [](AccelerateTrainingFlags f) -> std::string {
    try {
      check_training_flag_values(f);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return e.what();
    }
    return "";
  };
  AccelerateTrainingFlags f;
  f.mixed_precision = "bf8";
  EXPECT_HAS(error_of(f), "--mixed_precision 'bf8' is not one of no, fp16, bf16");
  f.mixed_precision = "fp8";
  EXPECT_HAS(error_of(f), "fp8 training is not supported");
  f = {};
  f.offload_optimizer_device = "disk";
  EXPECT_HAS(error_of(f), "--offload_optimizer_device 'disk' is not one of none, cpu, nvme");
  f = {};
  f.gradient_clipping = "-1";
  EXPECT_HAS(error_of(f), "--gradient_clipping '-1' is not a number >= 0");
  f.gradient_clipping = "1.0";
  EXPECT_EQ(error_of(f), "");
}

TEST(LaunchFormat, QuotesWordsTheShellWouldSplitOrExpand) {
  EXPECT_EQ(shell_quote("run.yaml"), "run.yaml");
  EXPECT_EQ(shell_quote("--host=a:2,b:2"), "--host=a:2,b:2");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("echo $RANK"), "'echo $RANK'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

}  // namespace
}  // namespace zt::cli
