// DeepSpeed's csv_monitor files (train/csv_monitor.h): names, header, rows, appending.
#include "train/csv_monitor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/file_size_limit.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "core/log.h"

namespace zt::train {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CsvMonitor, FileNamesAreDeepSpeeds) {
  EXPECT_EQ(CsvMonitor::file_name("Train/Samples/train_loss"), "Train_Samples_train_loss.csv");
  EXPECT_EQ(CsvMonitor::file_name("my metric/x"), "my_metric_x.csv");
}

TEST(CsvMonitor, HeaderOnceThenShortestRoundTripRows) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("csv_monitor_"));
  const fs::path folder = dir.path() / "logs" / "job";  // created when missing
  {
    CsvMonitor m(folder.string());
    m.scalar("Train/Samples/lr", 0.1, 16);
    m.scalar("Train/Samples/lr", 2.5e-05, 32);
    m.scalar("Train/Samples/train_loss", 10.946125030517578, 16);
    m.flush();
    EXPECT_EQ(read_all(folder / "Train_Samples_lr.csv"), "step,lr\n16,0.1\n32,2.5e-05\n");
  }
  {
    CsvMonitor again(folder.string());  // a resumed run appends, no second header
    again.scalar("Train/Samples/lr", 1.0 / 3.0, 48);
  }
  EXPECT_EQ(read_all(folder / "Train_Samples_lr.csv"), "step,lr\n16,0.1\n32,2.5e-05\n48,0.3333333333333333\n");
  EXPECT_EQ(read_all(folder / "Train_Samples_train_loss.csv"), "step,train_loss\n16,10.946125030517578\n");
}

// A write that fails (a full disk; here the file size limit) is one warning naming the
// file and the error, and the run goes on without CSV rows.
TEST(CsvMonitor, AFailedWriteIsOneWarningNamingTheFileAndTheError) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("csv_monitor_full_"));
  const zt::LogLevel level = zt::log_level();
  zt::set_log_level(zt::LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  const fs::path file = dir.path() / "Train_Samples_lr.csv";
  {
    CsvMonitor m(dir.path().string());
    // 8 KiB of rows first: the limit applies to the captured stderr's file too.
    for (int s = 1; s <= 1000; ++s) m.scalar("Train/Samples/lr", 0.5, s);
    m.flush();
    const zt::testing::FileSizeLimit full(fs::file_size(file) + 3);
    m.scalar("Train/Samples/lr", 0.25, 1001);
    m.flush();
    EXPECT_TRUE(m.failed());
    m.scalar("Train/Samples/lr", 0.125, 1002);
    m.flush();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  zt::set_log_level(level);
  const size_t first = err.find("csv_monitor: cannot write " + file.string() + ": File too large");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("csv_monitor: cannot write", first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_NE(err.find("from step 1001"), std::string::npos) << err;
}

TEST(CsvMonitor, AnUnwritableFolderIsBadInputNamingTheKey) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("csv_monitor_bad_"));
  std::ofstream(dir.path() / "file") << "x";
  try {
    CsvMonitor m((dir.path() / "file" / "job").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("csv_monitor.output_path"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt::train
