// MetricsFile: records are lines of JSON; a write that fails (a full disk, here the file
// size limit) is one warning naming the file, the error and the step, and training is not
// stopped; a torn last record is cut off before a resumed run appends.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/file_size_limit.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "core/log.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using zt::train::MetricsFile;
using zt::train::MetricsState;

namespace {
size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}
}  // namespace

TEST(MetricsFile, WritesOneLinePerRecordAndAppendsOnResume) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("metrics_"));
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsFile m(path, false);
    m.write({{"step", 1}});
    m.write({{"step", 2}});
    EXPECT_EQ(m.state(), MetricsState::Writing);
  }
  MetricsFile(path, true).write({{"step", 3}});
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
}

TEST(MetricsFile, AFullDiskIsOneWarningNamingTheFileAndTheStep) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("metrics_"));
  const std::string path = dir.file("metrics.jsonl");
  const zt::LogLevel level = zt::log_level();
  zt::set_log_level(zt::LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  std::string before;
  {
    MetricsFile m(path, false);
    // 8 KiB of records first: the size limit applies to every file this process writes,
    // the captured stderr too, which must have room for the warning.
    for (int s = 1; s <= 400; ++s) m.write({{"step", s}, {"loss", 1.0}});
    before = zt::testing::file_bytes(path);
    const zt::testing::FileSizeLimit full(before.size() + 18);  // the next record is torn
    m.write({{"step", 401}, {"loss", 1.0}});
    EXPECT_EQ(m.state(), MetricsState::Failed);
    m.write({{"step", 402}, {"loss", 1.0}});
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  zt::set_log_level(level);
  EXPECT_EQ(count(err, "cannot write metrics file"), 1u) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;  // the errno, as ENOSPC on a full disk
  EXPECT_NE(err.find("from step 401"), std::string::npos) << err;
  const std::string record = nlohmann::json({{"step", 401}, {"loss", 1.0}}).dump();
  EXPECT_EQ(zt::testing::file_bytes(path), before + record.substr(0, 18)) << "the torn record a full disk leaves";
}

// A resumed run appends: a torn last record (the disk filled, the run was killed) is cut
// off first, with a warning, so the new records start on a line of their own.
TEST(MetricsFile, AppendingCutsOffATornLastRecord) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("metrics_"));
  const std::string path = dir.file("metrics.jsonl");
  std::ofstream(path) << "{\"step\":1}\n{\"step\":2}\n{\"st";
  const zt::LogLevel level = zt::log_level();
  zt::set_log_level(zt::LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  MetricsFile(path, true).write({{"step", 3}});
  const std::string err = ::testing::internal::GetCapturedStderr();
  zt::set_log_level(level);
  EXPECT_EQ(zt::testing::file_bytes(path), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  EXPECT_NE(err.find("ended with a torn record (4 bytes"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  // A whole file is appended to as it is.
  ::testing::internal::CaptureStderr();
  MetricsFile(path, true).write({{"step", 4}});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(zt::testing::file_bytes(path), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4}\n");
}

TEST(MetricsFile, AnUnwritablePathIsAnErrorNamingIt) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("metrics_"));
  const std::string path = dir.file("no/such/dir/metrics.jsonl");
  try {
    MetricsFile m(path, false);
    FAIL() << "opened " << path;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(HumanDuration, SecondsMinutesHoursDays) {
  using zt::train::human_duration;
  EXPECT_EQ(human_duration(0), "0s");
  EXPECT_EQ(human_duration(-3), "0s");
  EXPECT_EQ(human_duration(42.9), "42s");
  EXPECT_EQ(human_duration(187), "3m07s");
  EXPECT_EQ(human_duration(2 * 3600 + 5 * 60 + 59), "2h05m");
  EXPECT_EQ(human_duration(3 * 86400 + 4 * 3600 + 1), "3d04h");
}
