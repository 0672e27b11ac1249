// Stop signals of `zerotrain train`, each case injected at a chosen point by the
// fault injector (ZT_TEST_SIGNALS, src/core/fail_point.h) so nothing depends
// on when a signal from outside lands: a doubled SIGTERM during the save is absorbed; a
// third SIGINT and the grace timeout exit at once naming what was saved; a stop during a
// long gradient accumulation stops at a micro-batch boundary, saves the last complete
// step and resumes exactly; under mpirun a signal to one rank, or SIGUSR1 to mpirun,
// stops every rank at the same step; a signal during the end-of-run samples or
// `zerotrain generate` ends the generation before the next token.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;
using zt::testing::sh;
using zt::testing::ShellResult;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

struct SignalRun : ::testing::Test {
  void SetUp() override {
    dir = zt::testing::fresh_test_dir("signals_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    yaml = zt::testing::small_run_yaml(dir).string();
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  // `zerotrain train` on the small run with env assignments in front and args after.
  ShellResult train(const std::string& env, const std::string& args = "") const {
    return sh(env + " " + zt::testing::zerotrain_binary() + " train " + yaml + " --threads 1 " + args);
  }
  std::string latest() const {
    std::ifstream in(dir / "run" / "checkpoints" / "latest");
    std::string name;
    in >> name;
    return name;
  }
  // The training losses metrics.jsonl holds, by step.
  std::vector<double> losses() const {
    std::ifstream in(dir / "run" / "metrics.jsonl");
    std::vector<double> out;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json r = nlohmann::json::parse(line);
      if (r.contains("loss")) out.push_back(r["loss"].get<double>());
    }
    return out;
  }
  fs::path dir;
  std::string yaml;
};

}  // namespace

TEST_F(SignalRun, DoubledSigtermDuringTheSaveIsAbsorbedAndTheSaveCompletes) {
  // GNU timeout and Kubernetes send SIGTERM again; here two more land inside the save.
  const ShellResult r = train("ZT_TEST_SIGNALS='step@2:TERM,save@2:TERM+TERM'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "absorbed");
  EXPECT_HAS(r.out, "received signal 15: saved");
  EXPECT_EQ(latest(), "global_step2");
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "global_step2" / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir / "run" / "final")) << "a stopped run writes no final model";
}

// The text of the first `---- sample ... ----` block of a run's output.
std::string first_sample(const std::string& out) {
  const size_t head = out.find("---- sample");
  if (head == std::string::npos) return "";
  const size_t begin = out.find('\n', head) + 1;
  return out.substr(begin, out.find("\n----\n", begin) - begin);
}

TEST_F(SignalRun, SigtermDuringTheEndOfRunSamplesStopsThemBeforeTheNextToken) {
  std::ofstream(yaml, std::ios::app) << "samples: {prompts: ['Once upon a time', 'The license'], tokens: 400}\n";
  const std::string args = "--max_steps 2 --save_strategy no --overwrite_output_dir";
  const ShellResult whole = train("", args);
  ASSERT_EQ(whole.rc, 0) << whole.out;
  // SIGTERM raised before the sampler chooses token 3 of the first sample.
  const ShellResult r = train("ZT_TEST_SIGNALS='sample@3:TERM'", args);
  EXPECT_EQ(r.rc, 0) << r.out;  // the run is complete: final/ was written before the samples
  EXPECT_HAS(r.out, "received signal 15 during the end-of-run samples: they stop here (1 of 2 begun");
  EXPECT_TRUE(fs::exists(dir / "run" / "final" / "config.json"));
  const std::string cut = first_sample(r.out), full = first_sample(whole.out);
  ASSERT_FALSE(cut.empty()) << r.out;
  EXPECT_LT(cut.size(), full.size()) << "the sample was not cut short";
  EXPECT_EQ(full.compare(0, cut.size(), cut), 0) << "the cut sample is the start of the whole one";
  EXPECT_EQ(r.out.find("---- sample", r.out.find("---- sample") + 1), std::string::npos) << "a second sample ran";

  // `zerotrain generate` on the model just written: stops before token 3, exit 128 + 15.
  const ShellResult g =
      sh("ZT_TEST_SIGNALS='sample@3:TERM' timeout 60 " + zt::testing::zerotrain_binary() + " generate --model " +
         (dir / "run" / "final").string() + " --prompt 'Once' --max-new-tokens 400 --ignore-eos --threads 1");
  EXPECT_EQ(g.rc, 128 + 15) << g.out;
  EXPECT_HAS(g.out, "received signal 15: generation stopped after 3 of at most 400 tokens");
}

TEST_F(SignalRun, Sigusr1StopsLikeSigterm) {
  const ShellResult r = train("ZT_TEST_SIGNALS='step@2:USR1'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "received signal 10: saved");
  EXPECT_EQ(latest(), "global_step2");
}

TEST_F(SignalRun, ThirdSigintExitsAtOnceSayingWhatWasAndWasNotSaved) {
  // Step 3 is saved on schedule; the stop at step 4 is interrupted twice more in its save.
  const ShellResult r = train("ZT_TEST_SIGNALS='step@4:INT,save@4:INT+INT'");
  EXPECT_EQ(r.rc, 130) << r.out;
  EXPECT_HAS(r.out, "third SIGINT: exiting at once");
  EXPECT_HAS(r.out, "the checkpoint of step 4 was being written and is not complete");
  EXPECT_HAS(r.out, "global_step3 (step 3");
  EXPECT_EQ(latest(), "global_step3");
  const ShellResult resumed = train("", "--resume latest");
  EXPECT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_HAS(resumed.out, "at step 3");
}

TEST_F(SignalRun, GraceTimeoutExitsAtOnceDuringAStalledSave) {
  // The save stalls for 60 s (a hung file system); stop_grace_seconds 1 ends the process.
  const ShellResult r = train("ZT_TEST_SIGNALS='step@2:TERM' ZT_TEST_STALL_SAVE_S=60", "--stop_grace_seconds 1");
  EXPECT_EQ(r.rc, 128 + 15) << r.out;
  EXPECT_HAS(r.out, "stop_grace_seconds passed since the stop signal: exiting at once");
  EXPECT_HAS(r.out, "no checkpoint was saved by this run");
  EXPECT_FALSE(fs::exists(dir / "run" / "checkpoints" / "latest"));
}

TEST_F(SignalRun, StopDuringAccumulationSavesTheLastCompleteStepAndResumesExactly) {
  // Reference: 3 uninterrupted steps of 4 micro-batches.
  const std::string gas = "--gradient_accumulation_steps 4 --max_steps 3 --save_interval 0 --eval_interval 0";
  const ShellResult full = train("", gas);
  ASSERT_EQ(full.rc, 0) << full.out;
  const std::vector<double> want = losses();
  ASSERT_EQ(want.size(), 3u);
  // Stopped before micro-batch 2 of step 2: no update; step 1's state is saved.
  const ShellResult stopped = train("ZT_TEST_SIGNALS='micro@2.2:TERM'", gas + " --overwrite_output_dir");
  EXPECT_EQ(stopped.rc, 0) << stopped.out;
  EXPECT_HAS(stopped.out, "during step 2 (before micro-batch 2 of 4");
  EXPECT_EQ(latest(), "global_step1");
  // The resumed run sees the data step 2 would have seen: the same losses, bitwise.
  const ShellResult resumed = train("", gas + " --resume latest");
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_EQ(losses(), want);
}

TEST_F(SignalRun, AHugeAccumulationDoesNotOutlastTheSignal) {
  // A step of as many micro-batches as the data holds (70 of its 79 windows: a larger
  // global batch is refused up front); the stop lands before micro-batch 3, not at the
  // step's end.
  const ShellResult r =
      train("ZT_TEST_SIGNALS='micro@1.3:TERM'", "--gradient_accumulation_steps 70 --per_device_train_batch_size 1");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "during step 1 (before micro-batch 3 of 70");
  EXPECT_EQ(latest(), "global_step0");
}

TEST_F(SignalRun, UnderMpirunASignalToOneRankStopsEveryRankTogether) {
  if (!zt::testing::have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  const std::string mpi = zt::testing::kMpirunEnv + "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 ";
  const std::string cmd = " mpirun -np 2 " + zt::testing::zerotrain_binary() + " train " + yaml +
                          " --per_device_train_batch_size 2 --threads 1 ";
  // Rank 1 alone is signalled after step 2, then twice more in its save.
  ShellResult r = sh(mpi + "ZT_TEST_SIGNALS_RANK=1 ZT_TEST_SIGNALS='step@2:TERM,save@2:TERM+TERM'" + cmd);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(latest(), "global_step2");
  // Rank 0 alone, in the middle of step 4's accumulation: both stop without the update.
  r = sh(mpi + "ZT_TEST_SIGNALS_RANK=0 ZT_TEST_SIGNALS='micro@4.1:TERM'" + cmd + "--resume latest");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "during step 4 (before micro-batch 1 of 2");
  EXPECT_HAS(r.out, "stopping with the other ranks (a stop signal reached one of them) during step 4");
  EXPECT_EQ(latest(), "global_step3");
  // ZeRO-3 with overlapped communication stops between micro-batches the same way.
  r = sh(mpi + "ZT_TEST_SIGNALS_RANK=1 ZT_TEST_SIGNALS='micro@5.1:TERM'" + cmd +
         "--resume latest --zero_optimization.stage 3 --zero_optimization.overlap_comm true");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(latest(), "global_step4");
  r = sh(mpi + cmd + "--resume latest --zero_optimization.stage 3 --zero_optimization.overlap_comm true");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "resumed from");
  EXPECT_EQ(latest(), "global_step6");  // ZeRO-3's result is its checkpoint (no final/ by default)
}

TEST_F(SignalRun, Sigusr1ToMpirunReachesEveryRankAndTheJobExitsZero) {
  if (!zt::testing::have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  // docs/launching.md's advice for OpenMPI: SIGUSR1 to mpirun, which forwards it to every
  // rank (a SIGTERM to mpirun ends the job instead). A real signal from outside, sent once
  // training runs; the outcome does not depend on when it lands.
  const std::string log = (dir / "mpirun.log").string();
  const std::string script = (dir / "stop.sh").string();
  std::ofstream(script) << zt::testing::kMpirunEnv << "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 mpirun -np 2 "
                        << zt::testing::zerotrain_binary() << " train " << yaml
                        << " --per_device_train_batch_size 2 --threads 1 --max_steps 1000000 >" << log
                        << " 2>&1 &\npid=$!\n"
                        << "i=0; while ! grep -q 'step      2/' " << log
                        << " && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n"
                        << "kill -USR1 $pid\nwait $pid\necho mpirun=$?\n";
  const ShellResult r = sh("sh " + script);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_HAS(r.out, "mpirun=0");
  // Both ranks stop at the same step and say so.
  const size_t first = text.find("received signal 10");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_NE(text.find("received signal 10", first + 1), std::string::npos) << text;
  EXPECT_EQ(latest().rfind("global_step", 0), 0u) << latest();
}

TEST_F(SignalRun, TwoSigtermsToZerotrainLaunchOverMpirunStopEveryRankWithExitZero) {
  if (!zt::testing::have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  // GNU timeout's pattern: SIGTERM, then SIGTERM again. The launcher hands an mpirun job
  // SIGUSR1 (mpirun forwards it; a SIGTERM would end the job) and the ranks absorb the second.
  const std::string log = (dir / "launch.log").string();
  const std::string script = (dir / "stop.sh").string();
  std::ofstream(script) << zt::testing::kMpirunEnv << "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 "
                        << zt::testing::zerotrain_binary() << " launch --nproc-per-node 2 --max-restarts 2 -- "
                        << zt::testing::zerotrain_binary() << " train " << yaml
                        << " --per_device_train_batch_size 2 --threads 1 --max_steps 1000000 >" << log
                        << " 2>&1 &\npid=$!\n"
                        << "i=0; while ! grep -q 'step      2/' " << log
                        << " && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n"
                        << "kill -TERM $pid; kill -TERM $pid\nwait $pid\necho launch=$?\n";
  const ShellResult r = sh("sh " + script);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_HAS(r.out, "launch=0");
  const size_t first = text.find("received signal 10");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_NE(text.find("received signal 10", first + 1), std::string::npos) << text;
  EXPECT_EQ(text.find("restart 1/"), std::string::npos) << text;
  EXPECT_EQ(latest().rfind("global_step", 0), 0u) << latest();
}
