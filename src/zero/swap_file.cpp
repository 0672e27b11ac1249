#include "zero/swap_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"
#include "io/staging_dir.h"

namespace zt::zero {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  std::string h(buf);
  std::replace(h.begin(), h.end(), '/', '_');
  return h.empty() ? "host" : h;
}

// The process's swap folder is shared by its stores: created by the first, removed by the last.
std::mutex& folder_mutex() {
  static std::mutex m;
  return m;
}
// Stores per folder (each nvme_path has its own), under folder_mutex.
std::map<std::string, int>& folder_users() {
  static std::map<std::string, int> users;
  return users;
}

// Several threads may add (the parameter store's two): a compare-exchange loop.
void add_seconds(std::atomic<double>& total, double s) {
  double old = total.load(std::memory_order_relaxed);
  while (!total.compare_exchange_weak(old, old + s, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::vector<std::string> remove_stale_swap_folders(const std::string& nvme_path) {
  std::vector<std::string> removed;
  const std::string prefix = "zerotrain-" + host_name() + "-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(nvme_path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (!end || *end != '\0' || pid <= 0 || io::process_alive(pid)) continue;
    // Only a folder that carries our marker naming that pid: a user's folder of a like
    // name is not ours to delete.
    const std::optional<long> owner = io::marked_dir_owner(e.path().string());
    if (!owner && io::remove_empty_dir(e.path().string())) {  // killed between its mkdir and its marker
      removed.push_back(e.path().string());
      continue;
    }
    if (!owner || *owner != pid) continue;
    std::error_code rec;
    fs::remove_all(e.path(), rec);
    if (!rec) removed.push_back(e.path().string());
  }
  return removed;
}

SwapFile::SwapFile(const SwapFileOptions& options) {
  const std::string& root = options.nvme_path;
  std::error_code ec;
  // Created when missing, as DeepSpeed's swappers do (the guides' /local_nvme, the seed
  // config's /tmp/zerotrain_nvme).
  fs::create_directories(root, ec);
  if (!fs::is_directory(root, ec))
    ZT_THROW_INPUT("offload nvme_path ", root, ": not a folder and cannot be created",
                   ec ? ": " + ec.message() : std::string(), "; point it at a folder on a local NVMe drive");
  for (const std::string& p : remove_stale_swap_folders(root))
    ZT_WARN("removed ", p, ", the NVMe swap folder of a zerotrain process that is gone");
  folder_ = (fs::path(root) / ("zerotrain-" + host_name() + "-" + std::to_string(::getpid()))).string();
  // One marked folder per process, shared by its stores (the optimizer's, the parameters',
  // a test's second one), each with a file of its own; the last store to go removes it.
  {
    const std::lock_guard<std::mutex> guard(folder_mutex());
    if (folder_users()[folder_]++ == 0) {
      try {
        if (io::marked_dir_owner(folder_) != std::optional<long>(::getpid())) io::create_marked_dir(folder_);
      } catch (const std::exception& e) {
        folder_users().erase(folder_);
        ZT_THROW_INPUT("offload nvme_path ", root, ": cannot create the swap folder ", folder_, ": ", e.what(),
                       "; make nvme_path writable");
      }
    }
  }
  static std::atomic<int> files{0};
  const int n = files.fetch_add(1);
  path_ = folder_ + "/rank" + std::to_string(options.rank) + "-" + options.label +
          (n == 0 ? std::string() : "-" + std::to_string(n)) + ".swp";
  try {
    file_ = io::DirectFile(path_, io::FileAccess::ReadWrite);
    if (file_.mode() == io::IoMode::Buffered)
      ZT_WARN(file_.fallback_reason(), ": NVMe offload swaps through the page cache");
    aio_ = std::make_unique<io::AsyncIo>(options.aio);
  } catch (...) {
    file_ = io::DirectFile();
    fs::remove(path_, ec);
    release_folder();
    throw;
  }
}

void SwapFile::release_folder() noexcept {
  const std::lock_guard<std::mutex> guard(folder_mutex());
  if (--folder_users()[folder_] > 0) return;
  folder_users().erase(folder_);
  std::error_code ec;
  fs::remove_all(folder_, ec);  // our marked folder: the marker and what is left of ours
}

SwapFile::~SwapFile() {
  aio_.reset();  // waits for every transfer
  file_ = io::DirectFile();
  std::error_code ec;
  fs::remove(path_, ec);
  release_folder();  // the last store of this process removes the shared folder
}

std::unique_lock<std::mutex> SwapFile::io_lock() {
  if (aio_->engine() == io::IoEngine::Uring) return std::unique_lock<std::mutex>(io_mutex_);
  return {};
}

void SwapFile::reserve(uint64_t bytes) { file_.reserve(bytes); }

bool SwapFile::register_buffer(void* data, size_t bytes) {
  const auto lock = io_lock();
  return aio_->register_buffer(data, bytes);
}

io::IoTicket SwapFile::read(void* buffer, size_t bytes, uint64_t offset) {
  const auto lock = io_lock();
  const io::IoTicket t = aio_->read(file_, buffer, bytes, offset);
  read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return t;
}

io::IoTicket SwapFile::write(const void* buffer, size_t bytes, uint64_t offset) {
  const auto lock = io_lock();
  const io::IoTicket t = aio_->write(file_, buffer, bytes, offset);
  written_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return t;
}

void SwapFile::wait(io::IoTicket ticket, IoDirection direction) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    const auto lock = io_lock();
    aio_->wait(ticket);
  }
  add_seconds(direction == IoDirection::Read ? read_wait_s_ : write_wait_s_,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void SwapFile::drain() noexcept {
  const auto lock = io_lock();
  // A failed transfer is forgotten as it throws: go on until none is left.
  for (;;) {
    try {
      aio_->wait_all();
      return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): dropped (header)
    }
  }
}

SwapTraffic SwapFile::traffic() const {
  return {read_bytes_.load(std::memory_order_relaxed), written_bytes_.load(std::memory_order_relaxed),
          read_wait_s_.load(std::memory_order_relaxed), write_wait_s_.load(std::memory_order_relaxed)};
}

// The whole direct-I/O blocks around [offset, offset + bytes) read into an aligned bounce
// buffer; `at` is where the range starts in it.
struct SwapFile::Bounce {
  uint64_t lo;
  size_t at, span;
  io::AlignedBuffer buffer;
};

SwapFile::Bounce SwapFile::read_blocks(uint64_t offset, size_t bytes) {
  const uint64_t lo = offset / io::kDirectAlignment * io::kDirectAlignment;
  const size_t span = io::round_up_to_direct(static_cast<size_t>(offset - lo) + bytes);
  Bounce b{lo, static_cast<size_t>(offset - lo), span, io::AlignedBuffer(span)};
  file_.read_at(b.buffer.data(), span, lo);
  return b;
}

void SwapFile::read_range(uint64_t offset, size_t bytes, void* dst) {
  const Bounce b = read_blocks(offset, bytes);
  std::memcpy(dst, static_cast<char*>(b.buffer.data()) + b.at, bytes);
}

void SwapFile::write_range(uint64_t offset, size_t bytes, const void* src) {
  Bounce b = read_blocks(offset, bytes);  // the neighbours' bytes in the first and last blocks
  std::memcpy(static_cast<char*>(b.buffer.data()) + b.at, src, bytes);
  file_.write_at(b.buffer.data(), b.span, b.lo);
}

}  // namespace zt::zero
