// MetricsFile: records are lines of JSON; a write that fails (a full disk: /dev/full) is
// one warning naming the file, the error and the step, and training is not stopped.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <string>

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
  // A file at the file size limit (SIGXFSZ ignored: writes past it fail with EFBIG, as on
  // a full disk). Output files are never opened through a link, so /dev/full is out.
  zt::testing::TempDir dir(zt::testing::build_temp_path("metrics_"));
  const std::string path = dir.file("metrics.jsonl");
  constexpr rlim_t kLimit = 1 << 16;
  std::ofstream(path) << std::string(kLimit, ' ');
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < kLimit) GTEST_SKIP() << "file size limit below the test's";
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit low = saved;
  low.rlim_cur = kLimit;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  const zt::LogLevel level = zt::log_level();
  zt::set_log_level(zt::LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  {
    MetricsFile m(path, true);
    m.write({{"step", 5}, {"loss", 1.0}});
    EXPECT_EQ(m.state(), MetricsState::Failed);
    m.write({{"step", 6}, {"loss", 1.0}});
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  zt::set_log_level(level);
  EXPECT_EQ(count(err, "cannot write metrics file"), 1u) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_NE(err.find("from step 5"), std::string::npos) << err;
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
