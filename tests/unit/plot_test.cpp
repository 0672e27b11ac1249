// `zerotrain plot` (train/plot.h): metrics.jsonl -> an SVG with four panels; bad input names
// the file (and the line).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/temp_dir.h"
#include "core/error.h"
#include "core/log.h"
#include "train/plot.h"

namespace zt::train {
namespace {

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(Plot, FourPanelsOfTheStepRecordsAndTheValidationLosses) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("plot_"));
  const std::string path = dir.file("metrics.jsonl");
  {
    std::ofstream f(path);
    for (int s = 1; s <= 10; ++s)
      f << R"({"step": )" << s << R"(, "loss": )" << 10.0 - s * 0.5 << R"(, "lr": )" << 1e-3 * s
        << R"(, "grad_norm": 1.5, "tokens_per_s": )" << 1000 + s << R"(, "skipped": false})" << "\n";
    f << R"({"step": 5, "val_loss": 7.5, "val_ppl": 1808.0, "skipped": false})" << "\n";
    f << R"({"step": 10, "val_loss": 5.5, "val_ppl": 244.7, "skipped": false})" << "\n";
    f << R"({"event": "run_start"})" << "\n";  // other records are skipped
  }
  const std::string svg = plot_metrics_svg(path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count_of(svg, "<polyline"), 4u);  // loss, lr, tokens/s, grad norm
  EXPECT_EQ(count_of(svg, "<circle"), 2u);    // the validation losses
  const size_t points = svg.find("points=\"");
  const std::string first = svg.substr(points + 8, svg.find('"', points + 8) - points - 8);
  EXPECT_EQ(count_of(first, " ") + 1, 10u) << "one point per step record: " << first;
  EXPECT_NE(svg.find(">10 steps<"), std::string::npos);
}

TEST(Plot, BadInputNamesTheFile) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("plot_bad_"));
  const auto error_of = [](const std::string& p) {
    try {
      plot_metrics_svg(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(dir.file("none.jsonl")).find("none.jsonl: cannot open"), std::string::npos);
  std::ofstream(dir.file("empty.jsonl")) << R"({"step": 3, "val_loss": 2.0})" << "\n";
  EXPECT_NE(error_of(dir.file("empty.jsonl")).find("no training step records"), std::string::npos);
  std::ofstream(dir.file("broken.jsonl")) << R"({"step": 1, "loss": 2.0})" << "\n{oops\n";
  EXPECT_NE(error_of(dir.file("broken.jsonl")).find("broken.jsonl:2: not a JSON record"), std::string::npos);
}

// A full disk cuts the last record of metrics.jsonl short (no end of line): the records
// before it are plotted, with a warning naming the file and the line; a bad line that
// ends with a newline (damage, not a cut-off write) is still an error.
TEST(Plot, ATornLastRecordIsSkippedWithAWarning) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("plot_torn_"));
  const std::string path = dir.file("metrics.jsonl");
  std::ofstream(path) << R"({"step": 1, "loss": 3.0})"
                      << "\n"
                      << R"({"step": 2, "loss": 2.5})"
                      << "\n"
                      << R"({"step": 3, "lo)";
  const LogLevel level = log_level();
  set_log_level(LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  const std::string svg = plot_metrics_svg(path);
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  EXPECT_EQ(count_of(svg, "<polyline"), 1u);
  EXPECT_NE(err.find(path + ":3: the last record is cut off"), std::string::npos) << err;

  std::ofstream(path) << R"({"step": 1, "loss": 3.0})"
                      << "\n"
                      << R"({"step": 2, "lo)"
                      << "\n"
                      << R"({"step": 3, "loss": 2.0})"
                      << "\n";
  try {
    plot_metrics_svg(path);
    ADD_FAILURE() << "a bad line in the middle was plotted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:2: not a JSON record"), std::string::npos) << e.what();
  }
}

// Only regular files: /dev/zero (it never ends) is an exit-2 error saying what it is (a
// FIFO: tests/e2e/bounded_inputs_test.cpp, under a timeout).
TEST(Plot, DevicesAreRefused) {
  for (const std::string& p : {std::string("/dev/zero")}) {
    try {
      plot_metrics_svg(p);
      ADD_FAILURE() << p << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find(p + ": not a regular file (it is a"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zt::train
