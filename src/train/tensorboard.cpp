#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"

namespace zt::train {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}

// TFRecord's masking, so that a CRC of data that holds CRCs stays meaningful.
uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <class T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts, as protobuf's fixed types
  out.append(b, sizeof(T));
}
// A length-delimited field (wire type 2).
void put_bytes(std::string& out, int field, const std::string& bytes) {
  out.push_back(static_cast<char>(field << 3 | 2));
  put_varint(out, bytes.size());
  out += bytes;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; ... }
std::string event_header(int64_t step) {
  std::string e;
  e.push_back(static_cast<char>(1 << 3 | 1));
  put_fixed<double>(e, unix_seconds());
  e.push_back(static_cast<char>(2 << 3 | 0));
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < bytes; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(unix_seconds())) + "." + host +
          "." + std::to_string(::getpid());
  file_ = io::open_file_for_write(path_, io::WriteOpen::Truncate,
                                  "report_to tensorboard: set logging_dir to a writable folder");
  // Event { double wall_time = 1; string file_version = 3; }
  std::string first;
  first.push_back(static_cast<char>(1 << 3 | 1));
  put_fixed<double>(first, unix_seconds());
  put_bytes(first, 3, "brain.Event:2");
  record(first);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  step_ = step;
  // Summary.Value { string tag = 1; float simple_value = 2; }
  std::string v;
  put_bytes(v, 1, tag);
  v.push_back(static_cast<char>(2 << 3 | 5));
  put_fixed<float>(v, static_cast<float>(value));
  std::string summary;  // Summary { repeated Value value = 1; }
  put_bytes(summary, 1, v);
  std::string event = event_header(step);  // Event { ...; Summary summary = 5; }
  put_bytes(event, 5, summary);
  record(event);
}

void TensorBoardWriter::flush() {
  errno = 0;
  if (file_ && std::fflush(file_) != 0) fail(errno != 0 ? errno : EIO);
}

void TensorBoardWriter::fail(int err) {
  state_ = State::Failed;
  std::fclose(file_);
  file_ = nullptr;
  const std::string from = step_ >= 0 ? " from step " + std::to_string(step_) : std::string();
  ZT_WARN("cannot write TensorBoard events file '", path_, "': ", std::strerror(err), "; events", from,
          " on are not recorded (training goes on; metrics.jsonl and the log lines still have them): free space on "
          "its file system or set logging_dir to another drive");
}

void TensorBoardWriter::record(const std::string& event) {
  std::string frame;
  const uint64_t n = event.size();
  put_fixed<uint64_t>(frame, n);
  put_fixed<uint32_t>(frame, masked(crc32c(frame.data(), sizeof n)));
  frame += event;
  put_fixed<uint32_t>(frame, masked(crc32c(event.data(), event.size())));
  // A failed write loses plots, not the run (metrics.jsonl has the numbers too).
  errno = 0;
  if (file_ && std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size()) fail(errno != 0 ? errno : EIO);
}

}  // namespace zt::train
