// The step reporter's sinks (train/step_reporter.h): the step line and its extra lines on a
// stream, metrics.jsonl's records, DeepSpeed's CSV tags, and the evaluations each sink
// reports (or not).
#include "train/step_reporter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"

namespace zt::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StepRecord record() {
  StepRecord r;
  r.step = 20;
  r.total_steps = 100;
  r.loss = 2.5;
  r.lr = 1e-3f;
  r.grad_norm = 0.75;
  r.loss_scale = 1;
  r.tokens_per_s = 1234;
  r.mfu = 0.125;
  r.rss_bytes = 2 << 20;
  r.elapsed_s = 65;
  r.eta_s = 260;
  r.comm_bytes_per_step = 4096;
  r.target_tokens = 512;
  r.samples = 160;
  r.steps = 10;
  r.seconds = 2;
  return r;
}

// What a sink writes to a stream, as text.
template <class F>
std::string console(F&& report) {
  std::FILE* f = std::tmpfile();
  const std::unique_ptr<StepSink> sink = console_sink(f);
  report(*sink);
  std::rewind(f);
  std::string text;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  std::fclose(f);
  return text;
}

TEST(StepReporter, TheConsoleLineSaysWhatTheRunHas) {
  const std::string plain = console([](StepSink& s) { s.step(record()); });
  EXPECT_EQ(
      plain,
      "step     20/100 | loss 2.5000 | lr 1.000e-03 | grad norm  0.7500 | scale 1 |     1234 tok/s | MFU  12.5% | "
      "mem 2.0 MiB | 1m05s elapsed, ETA 4m20s\n");
  StepRecord r = record();
  r.comm_shown = true;
  r.targets_shown = true;
  r.skipped = true;
  r.skipped_steps = 3;
  r.gpu = true;
  r.gpu_peak_bytes = 3 << 20;
  r.nvme = SwapRates{4e9, 2e9, 5};
  r.times = StepTimes{1, 2, 3, 4};
  const std::string full = console([&](StepSink& s) { s.step(r); });
  EXPECT_NE(full.find(" | gpu peak 3.0 MiB | 1m05s elapsed, ETA 4m20s | comm 4.0 KiB/step | nvme r 2.00 w 1.00 GB/s, "
                      "waited 0.50 s/step | targets 512 | overflow: skipped (3 so far)\n"),
            std::string::npos)
      << full;
  EXPECT_NE(full.find("\ntime (ms/step, mean of 10) | fwd: 1.00 | bwd: 2.00 | step: 3.00 | comm: 4.00\n"),
            std::string::npos)
      << full;
  EXPECT_EQ(console([](StepSink& s) {
              s.evaluation({20, 100, 2.0, false});
            }),
            "step     20/100 | val loss 2.0000 | val ppl 7.39\n");
}

TEST(StepReporter, MetricsHaveOneRecordPerStepLineAndEvaluation) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("step_reporter_"));
  const fs::path path = dir.path() / "metrics.jsonl";
  {
    const std::unique_ptr<StepSink> sink = metrics_sink(path.string(), false);
    StepRecord r = record();
    r.grad_norm = std::numeric_limits<double>::quiet_NaN();  // a skipped step has none
    r.times = StepTimes{1, 2, 3, 4};
    sink->step(r);
    sink->evaluation({20, 100, 2.0, true});
  }
  std::istringstream lines(read_all(path));
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const json step = json::parse(line);
  EXPECT_EQ(step["step"], 20);
  EXPECT_EQ(step["loss"], 2.5);
  EXPECT_TRUE(step["grad_norm"].is_null());
  EXPECT_TRUE(step["gpu_peak_bytes"].is_null());
  EXPECT_EQ(step["comm_bytes_per_step"], 4096.0);
  EXPECT_EQ(step["target_tokens"], 512);
  EXPECT_EQ(step["time_ms"]["comm"], 4.0);
  EXPECT_FALSE(step.contains("nvme"));
  ASSERT_TRUE(std::getline(lines, line));
  const json eval = json::parse(line);
  EXPECT_EQ(eval["val_loss"], 2.0);
  EXPECT_DOUBLE_EQ(eval["val_ppl"].get<double>(), std::exp(2.0));
  EXPECT_EQ(eval["skipped"], true);
  EXPECT_FALSE(std::getline(lines, line));
  // A resumed run appends.
  metrics_sink(path.string(), true)->evaluation({30, 100, 1.5, false});
  const std::string all = read_all(path);
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 3) << all;
}

TEST(StepReporter, CsvSinkWritesDeepSpeedsTagsAgainstSamplesAndNoEvaluations) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("step_reporter_"));
  {
    const std::unique_ptr<StepSink> sink = csv_sink((dir.path() / "csv").string());
    StepRecord r = record();
    sink->step(r);
    r.loss_scaler = true;  // fp16: the scale gets its own file
    r.step = 30;
    r.samples = 240;
    sink->step(r);
    sink->evaluation({30, 100, 1.5, false});
  }
  EXPECT_EQ(read_all(dir.path() / "csv" / "Train_Samples_train_loss.csv"), "step,train_loss\n160,2.5\n240,2.5\n");
  EXPECT_EQ(read_all(dir.path() / "csv" / "Train_Samples_loss_scale.csv"), "step,loss_scale\n240,1\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path() / "csv"), fs::directory_iterator()), 3);
}

TEST(StepReporter, TensorBoardSinkWritesEventsForStepsAndHfEvaluations) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("step_reporter_"));
  const auto event_bytes = [&](config::TrainConfig::TensorBoardTags tags, const fs::path& folder) {
    {
      const std::unique_ptr<StepSink> sink = tensorboard_sink(folder.string(), tags);
      sink->step(record());
      sink->evaluation({20, 100, 2.0, false});
    }
    const fs::path file = fs::directory_iterator(folder)->path();
    return read_all(file);
  };
  const std::string hf = event_bytes(config::TrainConfig::TensorBoardTags::Hf, dir.path() / "hf");
  EXPECT_NE(hf.find("train/loss"), std::string::npos);
  EXPECT_NE(hf.find("eval/loss"), std::string::npos);
  const std::string ds = event_bytes(config::TrainConfig::TensorBoardTags::DeepSpeed, dir.path() / "ds");
  EXPECT_NE(ds.find("Train/Samples/train_loss"), std::string::npos);
  EXPECT_EQ(ds.find("eval/loss"), std::string::npos);
  EXPECT_EQ(ds.find("train/loss"), std::string::npos);
}

}  // namespace
}  // namespace zt::train
