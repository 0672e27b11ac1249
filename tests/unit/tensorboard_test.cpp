// TensorBoard event files (train/tensorboard.h): TFRecord frames with masked CRC-32C and
// hand-written Event protocol buffers, read back here field by field as TensorBoard's
// reader does (frame lengths and both CRCs checked; the file_version event first; then
// one scalar per event with its step and tag).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/file_size_limit.h"
#include "common/temp_dir.h"
#include "core/log.h"
#include "train/tensorboard.h"

namespace zt::train {
namespace {

struct Scalar {
  std::string tag;
  float value = 0;
  int64_t step = -1;
  double wall_time = 0;
  std::string file_version;
};

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t varint(const std::string& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(b.at(at++));
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
}

// The fields of one Event (and of its Summary's single Value), unknown ones rejected.
Scalar parse_event(const std::string& e) {
  Scalar s;
  for (size_t at = 0; at < e.size();) {
    const uint64_t key = varint(e, at);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      std::memcpy(&s.wall_time, e.data() + at, 8);
      at += 8;
    } else if (field == 2 && wire == 0) {
      s.step = static_cast<int64_t>(varint(e, at));
    } else if (field == 3 && wire == 2) {
      const uint64_t n = varint(e, at);
      s.file_version = e.substr(at, n);
      at += n;
    } else if (field == 5 && wire == 2) {
      const uint64_t n = varint(e, at);
      const std::string summary = e.substr(at, n);
      at += n;
      size_t i = 0;
      EXPECT_EQ(varint(summary, i), (1u << 3) | 2u);
      const uint64_t value_bytes = varint(summary, i);
      const std::string value = summary.substr(i, value_bytes);
      for (size_t j = 0; j < value.size();) {
        const uint64_t k = varint(value, j);
        if (k == ((1u << 3) | 2u)) {
          const uint64_t n2 = varint(value, j);
          s.tag = value.substr(j, n2);
          j += n2;
        } else if (k == ((2u << 3) | 5u)) {
          std::memcpy(&s.value, value.data() + j, 4);
          j += 4;
        } else {
          ADD_FAILURE() << "unexpected Value field " << k;
          return s;
        }
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << field << " wire " << wire;
      return s;
    }
  }
  return s;
}

std::vector<Scalar> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), {});
  std::vector<Scalar> out;
  for (size_t at = 0; at < b.size();) {
    uint64_t n = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&n, b.data() + at, 8);
    std::memcpy(&len_crc, b.data() + at + 8, 4);
    EXPECT_EQ(len_crc, masked(crc32c(b.data() + at, 8)));
    const std::string event = b.substr(at + 12, n);
    std::memcpy(&data_crc, b.data() + at + 12 + n, 4);
    EXPECT_EQ(data_crc, masked(crc32c(event.data(), event.size())));
    out.push_back(parse_event(event));
    at += 12 + n + 4;
  }
  return out;
}

TEST(TensorBoard, Crc32cIsCastagnoli) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, EventFileHoldsTheVersionThenOneScalarPerEvent) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("tensorboard_"));
  std::string path;
  {
    TensorBoardWriter w((dir.path() / "runs").string());
    path = w.path();
    w.scalar("train/loss", 2.5, 1);
    w.scalar("train/learning_rate", 3e-4, 1);
    w.scalar("eval/loss", 2.25, 300);
  }
  EXPECT_NE(std::filesystem::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
  const std::vector<Scalar> ev = read_events(path);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);
  EXPECT_EQ(ev[1].tag, "train/loss");
  EXPECT_EQ(ev[1].value, 2.5f);
  EXPECT_EQ(ev[1].step, 1);
  EXPECT_EQ(ev[2].tag, "train/learning_rate");
  EXPECT_EQ(ev[2].value, 3e-4f);
  EXPECT_EQ(ev[3].tag, "eval/loss");
  EXPECT_EQ(ev[3].step, 300);
}

// A write that fails (a full disk; here the file size limit) is one warning naming the
// file and the error, and the run goes on; nothing more is written after it.
TEST(TensorBoard, AFailedWriteIsOneWarningNamingTheFileAndTheError) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("tensorboard_full_"));
  const zt::LogLevel level = zt::log_level();
  zt::set_log_level(zt::LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  std::string path;
  {
    TensorBoardWriter w((dir.path() / "runs").string());
    path = w.path();
    // 8 KiB of events first: the limit applies to the captured stderr's file too.
    for (int s = 1; s <= 200; ++s) w.scalar("train/loss", 2.5, s);
    w.flush();
    const uintmax_t size = std::filesystem::file_size(path);
    const zt::testing::FileSizeLimit full(size + 10);
    w.scalar("train/loss", 2.0, 201);
    w.flush();
    EXPECT_TRUE(w.failed());
    w.scalar("train/loss", 1.5, 202);
    w.flush();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  zt::set_log_level(level);
  const size_t first = err.find("cannot write TensorBoard events file '" + path + "': File too large");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("cannot write TensorBoard", first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_NE(err.find("from step 201"), std::string::npos) << err;
  EXPECT_NE(err.find("training goes on"), std::string::npos) << err;
}

}  // namespace
}  // namespace zt::train
