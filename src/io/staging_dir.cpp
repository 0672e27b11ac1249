#include "io/staging_dir.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.h"
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
  if (!fs::exists(target_, ec)) {
    fs::rename(staging_, target_, ec);
    if (ec) ZT_THROW_IO(target_, ": cannot move ", staging_, " into place (", ec.message(), ")");
    committed_ = true;
    return;
  }
  if (keep) {
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
  const std::string old = target_ + unique_suffix("old");
  fs::rename(target_, old, ec);
  if (ec) ZT_THROW_IO(target_, ": cannot move the existing directory aside (", ec.message(), ")");
  fs::rename(staging_, target_, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::rename(old, target_, ec);  // put the old one back
    ZT_THROW_IO(target_, ": cannot move ", staging_, " into place (", why, ")");
  }
  committed_ = true;
  fs::remove_all(old, ec);
  if (ec) ZT_WARN(target_, ": could not remove the previous version at ", old, " (", ec.message(), ")");
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
