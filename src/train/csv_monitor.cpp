#include "train/csv_monitor.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"

namespace zt::train {

CsvMonitor::CsvMonitor(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    ZT_THROW_INPUT("csv_monitor: cannot create ", dir_, " (", ec ? ec.message() : "not a folder",
                   "); set csv_monitor.output_path in the ds_config to a writable folder");
}

std::string CsvMonitor::file_name(const std::string& tag) {
  std::string name = tag;
  for (char& ch : name)
    if (ch == '/' || ch == ' ') ch = '_';
  return name + ".csv";
}

std::FILE* CsvMonitor::open(const std::string& tag) {
  auto it = files_.find(tag);
  if (it != files_.end()) return it->second.get();
  const std::string path = (std::filesystem::path(dir_) / file_name(tag)).string();
  std::FILE* f = io::open_file_for_write(
      path, io::WriteOpen::Append, "csv_monitor: set csv_monitor.output_path in the ds_config to a writable folder");
  files_.emplace(tag, std::unique_ptr<std::FILE, Closer>(f));
  if (std::ftell(f) == 0) {  // a new file: DeepSpeed's header, the tag's last part
    const size_t slash = tag.rfind('/');
    std::fprintf(f, "step,%s\n", (slash == std::string::npos ? tag : tag.substr(slash + 1)).c_str());
  }
  return f;
}

void CsvMonitor::scalar(const std::string& tag, double value, int64_t step) {
  if (state_ == State::Failed) return;
  step_ = step;
  // The shortest text that reads back as the same double, as Python's csv writer prints
  // repr(): 0.1, not 0.10000000000000001.
  char text[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  errno = 0;
  if (std::fprintf(open(tag), "%lld,%s\n", static_cast<long long>(step), text) < 0) fail(tag, errno != 0 ? errno : EIO);
}

void CsvMonitor::flush() {
  for (auto& [tag, f] : files_) {
    errno = 0;
    if (state_ == State::Writing && std::fflush(f.get()) != 0) {
      fail(tag, errno != 0 ? errno : EIO);
      return;
    }
  }
}

void CsvMonitor::fail(const std::string& tag, int err) {
  state_ = State::Failed;
  const std::string path = (std::filesystem::path(dir_) / file_name(tag)).string();
  files_.clear();  // closed; scalar() writes nothing more
  const std::string from = step_ >= 0 ? " from step " + std::to_string(step_) : std::string();
  ZT_WARN("csv_monitor: cannot write ", path, ": ", std::strerror(err), "; rows", from,
          " on are not recorded (training goes on; metrics.jsonl and the log lines still have them): free space on "
          "its file system or set csv_monitor.output_path to another drive");
}

}  // namespace zt::train
