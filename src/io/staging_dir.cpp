#include "io/staging_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "core/fail_point.h"
#include "core/log.h"
#include "io/safetensors.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {
std::string unique_suffix(const char* kind) {
  static std::atomic<uint64_t> counter{0};
  return str(".", kind, "-", ::getpid(), "-", counter++);
}
}  // namespace

StagingDir::StagingDir(std::string target) : target_(std::move(target)) {
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  if (target_.empty()) ZT_THROW_INPUT("output directory name is empty");
  std::error_code ec;
  if (fs::exists(target_, ec) && !fs::is_directory(target_, ec))
    ZT_THROW_INPUT(target_, ": exists and is not a directory; choose another output path");
  const fs::path parent = fs::path(target_).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) ZT_THROW_IO(target_, ": cannot create the parent directory ", parent.string(), " (", ec.message(), ")");
  }
  // Staging and aside directories of this target left by killed processes: removed here,
  // so that exports (consolidate, save_pretrained, final/) never accumulate them.
  for (const std::string& stale : remove_stale_staging(target_))
    ZT_WARN("removed ", stale, ", left by an interrupted save of ", target_);
  staging_ = target_ + unique_suffix("tmp");
  if (!fs::create_directory(staging_, ec) || ec)
    ZT_THROW_IO(target_, ": cannot create the staging directory ", staging_, " (",
                ec ? ec.message() : std::string("it exists"), ")");
}

StagingDir::~StagingDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);  // best effort: never throw from a destructor
}

void StagingDir::commit(const std::function<bool(const std::string&)>& keep) {
  ZT_CHECK(!committed_, "StagingDir committed twice");
  std::error_code ec;
  if (keep && fs::exists(target_, ec)) {
    // Carry over what the old directory had besides our outputs, before the swap, so
    // the swapped-in directory is complete. Renames within one filesystem are cheap.
    for (const auto& entry : fs::directory_iterator(target_, ec)) {
      const std::string name = entry.path().filename().string();
      if (!keep(name) || fs::exists(fs::path(staging_) / name)) continue;
      fs::rename(entry.path(), fs::path(staging_) / name, ec);
      if (ec) ZT_THROW_IO(target_, ": cannot move ", name, " into the new directory (", ec.message(), ")");
    }
    if (ec) ZT_THROW_IO(target_, ": cannot list the existing directory (", ec.message(), ")");
  }
  fail_point("staging.before_swap", fs::path(target_).filename().c_str());
  replace_directory(staging_, target_, target_ + unique_suffix("old"));
  committed_ = true;
}

namespace {

// renameat2(RENAME_EXCHANGE): swaps two existing paths atomically (Linux 3.15+, on ext4,
// xfs, btrfs, tmpfs, ...). False with errno EINVAL/ENOSYS/ENOTSUP where not supported.
bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2)
  // Test-only: the fallback path of filesystems without the exchange (NFS, ...).
  if (simulated(Simulated::NoRenameExchange)) {
    errno = EINVAL;
    return false;
  }
  constexpr unsigned kRenameExchange = 2;  // RENAME_EXCHANGE, <linux/fs.h>
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kRenameExchange) == 0;
#else
  (void)a;
  (void)b;
  errno = ENOSYS;
  return false;
#endif
}

// Makes the renames durable before the caller reports success (best effort: a directory
// that cannot be opened for fsync is left to the filesystem's own ordering).
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void replace_directory(const std::string& staged, const std::string& target, const std::string& aside) {
  std::error_code ec;
  const std::string name = fs::path(target).filename().string();
  if (!fs::exists(target, ec)) {
    fs::rename(staged, target, ec);
    if (ec) ZT_THROW_IO(target, ": cannot move ", staged, " into place (", ec.message(), ")");
    fsync_dir(fs::path(target).parent_path());
    return;
  }
  if (exchange_paths(staged, target)) {
    fsync_dir(fs::path(target).parent_path());
    fail_point("replace.swapped", name.c_str());
    fs::remove_all(staged, ec);  // the old directory, now at `staged`
    if (ec) ZT_WARN(target, ": could not remove the previous version at ", staged, " (", ec.message(), ")");
    return;
  }
  const int why_not = errno;
  if (why_not != EINVAL && why_not != ENOSYS && why_not != ENOTSUP && why_not != EPERM)
    ZT_THROW_IO(target, ": cannot swap ", staged, " into place (", std::strerror(why_not), ")");
  fs::rename(target, aside, ec);
  if (ec) ZT_THROW_IO(target, ": cannot move the existing directory aside (", ec.message(), ")");
  fail_point("replace.aside", name.c_str());
  fs::rename(staged, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::rename(aside, target, ec);  // put the old one back
    ZT_THROW_IO(target, ": cannot move ", staged, " into place (", why, ")");
  }
  fsync_dir(fs::path(target).parent_path());
  fs::remove_all(aside, ec);
  if (ec) ZT_WARN(target, ": could not remove the previous version at ", aside, " (", ec.message(), ")");
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::vector<std::string> remove_stale_staging(const std::string& target_in) {
  std::string target = target_in;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  std::vector<std::string> removed;
  const fs::path t(target);
  const fs::path parent = t.parent_path().empty() ? fs::path(".") : t.parent_path();
  const std::string base = t.filename().string();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {
      const std::string prefix = base + kind;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      char* end = nullptr;
      const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
      if (!end || *end != '-' || process_alive(pid)) continue;
      std::error_code rec;
      fs::remove_all(entry.path(), rec);
      if (!rec) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

std::vector<std::string> remove_stale_atomic_temps(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // <name>.tmp.<pid>.<n>: the last ".tmp." before the two numbers.
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || !entry.is_regular_file(ec)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + at + 5, &end, 10);
    if (!end || *end != '.' || end == name.c_str() + at + 5) continue;
    char* end2 = nullptr;
    std::strtoull(end + 1, &end2, 10);
    if (!end2 || *end2 != '\0' || end2 == end + 1 || process_alive(pid)) continue;
    std::error_code rec;
    fs::remove(entry.path(), rec);
    if (!rec) removed.push_back(entry.path().string());
  }
  return removed;
}

void copy_file_atomic(const std::string& src, const std::string& dst) {
  std::ifstream in(src, std::ios::binary);
  std::error_code ec;
  if (!in || !fs::is_regular_file(src, ec)) ZT_THROW_INPUT(src, ": no such file (to copy to ", dst, ")");
  write_file_atomic(dst, [&](std::FILE* f) {
    char buf[1 << 16];
    while (in) {
      in.read(buf, sizeof buf);
      const size_t n = static_cast<size_t>(in.gcount());
      if (n && std::fwrite(buf, 1, n, f) != n) ZT_THROW_IO(dst, ": write failed (", std::strerror(errno), ")");
    }
    if (in.bad()) ZT_THROW_IO(src, ": read failed");
  });
}

}  // namespace zt::io
