#include "io/staging_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "core/error.h"
#include "core/fail_point.h"
#include "core/log.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {
std::string unique_suffix(const char* kind) {
  static std::atomic<uint64_t> counter{0};
  return str(".", kind, "-", ::getpid(), "-", counter++);
}

bool lexists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string kind_name(mode_t mode) {
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a special file";
}

// Recreates `src` (an entry of the old target) at `dst` inside the staging directory
// without moving it: regular files hard-linked (copied where the filesystem refuses a
// link), directories rebuilt entry by entry, symbolic links re-made. The old target keeps
// every original until the swap has put the new directory, holding the same files, in its
// place.
void carry_over(const std::string& target, const std::string& src, const std::string& dst) {
  struct stat st {};
  if (::lstat(src.c_str(), &st) != 0)
    ZT_THROW_IO(target, ": cannot read ", src, " to keep it in the new directory (", std::strerror(errno), ")");
  const mode_t perms = st.st_mode & 07777;
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(dst.c_str(), 0700) != 0) ZT_THROW_IO(target, ": cannot create ", dst, " (", std::strerror(errno), ")");
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(src, ec)) {
      const std::string name = entry.path().filename().string();
      carry_over(target, src + "/" + name, dst + "/" + name);
    }
    if (ec) ZT_THROW_IO(target, ": cannot list ", src, " (", ec.message(), ")");
    ::chmod(dst.c_str(), perms);
    return;
  }
  if (S_ISLNK(st.st_mode)) {
    std::string to(static_cast<size_t>(st.st_size) + 1, '\0');
    const ssize_t n = ::readlink(src.c_str(), to.data(), to.size());
    if (n < 0 || static_cast<size_t>(n) >= to.size() ||
        ::symlink(to.substr(0, static_cast<size_t>(n)).c_str(), dst.c_str()) != 0)
      ZT_THROW_IO(target, ": cannot re-create the link ", src, " as ", dst, " (", std::strerror(errno), ")");
    return;
  }
  if (S_ISFIFO(st.st_mode)) {
    if (::mkfifo(dst.c_str(), perms) != 0)
      ZT_THROW_IO(target, ": cannot re-create the FIFO ", src, " as ", dst, " (", std::strerror(errno), ")");
    return;
  }
  if (!S_ISREG(st.st_mode))
    ZT_THROW_INPUT(target, ": ", src, " is ", kind_name(st.st_mode),
                   ", which cannot be kept in the new directory; move it out of ", target, " and run again");
  if (::link(src.c_str(), dst.c_str()) == 0) return;
  // No hard link (a filesystem without them, protected_hardlinks, a target that is a link
  // to another drive): a copy, with the same permissions.
  const int in = ::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (in < 0) ZT_THROW_IO(target, ": cannot read ", src, " to keep it (", std::strerror(errno), ")");
  const UniqueFd in_fd(in);
  const UniqueFd out = open_for_write(dst, WriteOpen::CreateNew, "", perms);
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ZT_THROW_IO(target, ": cannot read ", src, " to keep it (", std::strerror(errno), ")");
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.get(), buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ZT_THROW_IO(target, ": cannot copy ", src, " to ", dst, " (", std::strerror(errno), ")");
      done += w;
    }
  }
  ::fchmod(out.get(), perms);
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
  // Staging and aside folders of this target left by killed processes: cleaned up here,
  // so that exports (consolidate, save_pretrained, final/) never accumulate them.
  for (const std::string& stale : remove_stale_staging(target_))
    ZT_WARN("removed ", stale, ", left by an interrupted save of ", target_);
  folder_ = target_ + unique_suffix("tmp");
  create_marked_dir(folder_);
  staging_ = folder_ + "/dir";
  if (::mkdir(staging_.c_str(), 0755) != 0) {
    const std::string why = std::strerror(errno);
    fs::remove_all(folder_, ec);
    ZT_THROW_IO(target_, ": cannot create the staging directory ", staging_, " (", why, ")");
  }
}

StagingDir::~StagingDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(folder_, ec);  // best effort: never throw from a destructor
}

void StagingDir::commit(const std::function<bool(const std::string&)>& keep) {
  ZT_CHECK(!committed_, "StagingDir committed twice");
  std::error_code ec;
  if (keep && fs::is_directory(target_, ec)) {
    // What the old directory has besides our outputs, linked into the new one before the
    // swap so that the swapped-in directory is complete (see carry_over).
    for (const auto& entry : fs::directory_iterator(target_, ec)) {
      const std::string name = entry.path().filename().string();
      if (!keep(name) || lexists(staging_ + "/" + name)) continue;
      carry_over(target_, target_ + "/" + name, staging_ + "/" + name);
      fail_point("staging.carried", name.c_str());
    }
    if (ec) ZT_THROW_IO(target_, ": cannot list the existing directory (", ec.message(), ")");
  }
  fail_point("staging.before_swap", fs::path(target_).filename().c_str());
  replace_directory(staging_, target_, target_ + unique_suffix("old"));
  committed_ = true;
  fs::remove_all(folder_, ec);  // its marker: the old directory went with replace_directory
  if (ec) ZT_WARN(target_, ": could not remove the staging folder ", folder_, " (", ec.message(), ")");
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
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string aside_content(const std::string& aside) { return aside + "/dir"; }

void replace_directory(const std::string& staged, const std::string& target, const std::string& aside) {
  std::error_code ec;
  const std::string name = fs::path(target).filename().string();
  if (!lexists(target)) {
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
  // The old directory goes into a marked folder: a crash before the new one is in place
  // leaves it where the next run's clean-up finds it, and puts it back.
  create_marked_dir(aside);
  const std::string old = aside_content(aside);
  fs::rename(target, old, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove_all(aside, ec);
    ZT_THROW_IO(target, ": cannot move the existing directory aside (", why, ")");
  }
  fail_point("replace.aside", name.c_str());
  fs::rename(staged, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::rename(old, target, ec);  // put the old one back
    if (!ec) fs::remove_all(aside, ec);
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
  std::vector<std::pair<std::string, bool>> stale;  // path, whether an aside folder
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string(), path = entry.path().string();
    for (const bool aside : {false, true}) {
      const long pid = pid_in_temp_name(name, base + (aside ? ".old" : ".tmp"));
      if (pid <= 0 || process_alive(pid)) continue;  // not of that form, or its process runs
      const std::optional<long> owner = marked_dir_owner(path);
      if (owner && *owner == pid) {
        stale.emplace_back(path, aside);
      } else if (!owner && remove_empty_dir(path)) {
        removed.push_back(path);  // killed between its mkdir and its marker
      }
    }
  }
  // Asides first: a missing target is put back from one before any staging goes.
  std::stable_sort(stale.begin(), stale.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [path, aside] : stale) {
    std::error_code rec;
    if (aside && !lexists(target) && fs::is_directory(aside_content(path), rec)) {
      fs::rename(aside_content(path), target, rec);
      if (rec) {
        ZT_WARN("could not put ", aside_content(path), " back as ", target, " (", rec.message(), ")");
        continue;  // kept: it is the only whole copy
      }
      ZT_WARN("put ", aside_content(path), " back as ", target, " (an interrupted save had moved it aside)");
    }
    fs::remove_all(path, rec);
    if (!rec) removed.push_back(path);
  }
  return removed;
}

std::vector<std::string> remove_stale_atomic_temps(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  // The targets whose leftovers are here: <name>.tmp-<pid>-<n> (write_file_atomic's and
  // StagingDir's) and <name>.old-<pid>-<n> (an aside directory), cleaned up target by
  // target so that an aside one is put back where its target is missing.
  std::vector<std::string> targets;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {
      const size_t at = name.rfind(kind);
      if (at == std::string::npos || at == 0 || pid_in_temp_name(name, name.substr(0, at + 4)) <= 0) continue;
      const std::string target = (fs::path(dir) / name.substr(0, at)).string();
      if (std::find(targets.begin(), targets.end(), target) == targets.end()) targets.push_back(target);
    }
  }
  for (const std::string& target : targets)
    for (std::string& p : remove_stale_staging(target)) removed.push_back(std::move(p));
  return removed;
}

}  // namespace zt::io
