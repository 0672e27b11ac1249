// Atomic directory and file outputs (io/staging_dir.h, io/output_file.h):
// - a kill at every point of a directory swap (carrying the user's entries over, before the
//   swap, after the exchange, after the rename aside), followed by the next run's clean-up,
//   leaves the target whole (old or new) with the user's files in it, and nothing beside it;
// - clean-ups remove only folders carrying zerotrain's marker of a dead process: a user's
//   `model.old-2024-01-15` or an unmarked `model.tmp-<dead pid>-0` stays;
// - nothing is written through a symbolic link planted at an output name, nor into a FIFO.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/output_file.h"
#include "io/staging_dir.h"

namespace fs = std::filesystem;
using zt::testing::TempDir;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A marked folder as a process `pid` (dead or alive) would have left it.
void make_marked(const fs::path& dir, long pid) {
  fs::create_directories(dir);
  write(dir / zt::io::kStagingMarker, "zerotrain staging folder\npid " + std::to_string(pid) + "\n");
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The user's entries of an output directory: a README, a git repository, a source tree,
// a link. model.bin stands for our output, which a save replaces.
void fill_user_target(const fs::path& target) {
  write(target / "README.md", "the user's notes");
  write(target / ".git" / "config", "[core]");
  write(target / ".git" / "objects" / "ab" / "cdef", "object");
  write(target / "src" / "main.cpp", "int main() {}");
  fs::create_symlink("README.md", target / "LINK.md");
  write(target / "model.bin", "old");
}

void expect_user_files(const fs::path& target, const std::string& when) {
  EXPECT_EQ(read_all(target / "README.md"), "the user's notes") << when;
  EXPECT_EQ(read_all(target / ".git" / "config"), "[core]") << when;
  EXPECT_EQ(read_all(target / ".git" / "objects" / "ab" / "cdef"), "object") << when;
  EXPECT_EQ(read_all(target / "src" / "main.cpp"), "int main() {}") << when;
  EXPECT_TRUE(fs::is_symlink(target / "LINK.md")) << when;
  EXPECT_EQ(fs::read_symlink(target / "LINK.md"), "README.md") << when;
}

// A save of `target` in a child process that sets `env` (a fail point): its exit status.
int save_in_child(const fs::path& target, const std::vector<std::pair<std::string, std::string>>& env) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    try {
      zt::io::StagingDir staging(target.string());
      write(staging.file("model.bin"), "new");
      staging.commit([](const std::string& name) { return name != "model.bin"; });
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

// Every point of the swap: the child is killed there (exchange and rename-aside paths);
// the target is then one whole directory with the user's files, the next run's clean-up
// leaves the same (putting an aside target back), and a save after it completes.
TEST(StagingDir, AKillAtEveryPointOfTheSwapLosesNoUserFile) {
  TempDir tmp(zt::testing::build_temp_path("staging_kill_"));
  struct Case {
    std::string point;
    bool exchange;
  };
  const std::vector<Case> cases = {{"staging.carried@README.md", true},
                                   {"staging.carried@src", true},
                                   {"staging.before_swap", true},
                                   {"replace.swapped", true},
                                   {"staging.carried@.git", false},
                                   {"staging.before_swap", false},
                                   {"replace.aside", false}};
  for (const Case& c : cases) {
    const std::string when = c.point + (c.exchange ? " (exchange)" : " (rename aside)");
    const fs::path parent = tmp.path() / ("p" + std::to_string(&c - cases.data()));
    const fs::path target = parent / "model";
    fill_user_target(target);
    std::vector<std::pair<std::string, std::string>> env = {{"ZT_TEST_FAIL_AT", c.point}};
    if (!c.exchange) env.emplace_back("ZT_TEST_NO_RENAME_EXCHANGE", "1");
    const int status = save_in_child(target, env);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << when << ": the fail point was not reached";

    // Right after the kill: the target is whole (old or new), or, between the two renames
    // of the no-exchange path, missing with the old one aside.
    const bool aside_gap = c.point == "replace.aside";
    if (!aside_gap) {
      const std::string model = read_all(target / "model.bin");
      EXPECT_TRUE(model == "old" || model == "new") << when << ": " << model;
      expect_user_files(target, when + ", after the kill");
    } else {
      EXPECT_FALSE(fs::exists(target)) << when;
    }
    // The next run's clean-up: nothing of the user's is lost, nothing of ours is left.
    zt::io::remove_stale_staging(target.string());
    expect_user_files(target, when + ", after the clean-up");
    EXPECT_EQ(names_in(parent), std::set<std::string>{"model"}) << when;

    ASSERT_EQ(save_in_child(target, {}), 0) << when;
    EXPECT_EQ(read_all(target / "model.bin"), "new") << when;
    expect_user_files(target, when + ", after the next save");
    EXPECT_EQ(names_in(parent), std::set<std::string>{"model"}) << when;
    EXPECT_FALSE(fs::exists(target / zt::io::kStagingMarker)) << when;
  }
}

// The clean-up removes marked folders of dead processes only: a user's folder that merely
// matches the name pattern (no marker, or a marker naming another pid) is left, with what it
// holds; a live process's marked folder too. An empty unmarked one goes (rmdir).
TEST(StagingDir, CleanUpRemovesOnlyMarkedFoldersOfDeadProcesses) {
  TempDir tmp(zt::testing::build_temp_path("staging_marker_"));
  const fs::path target = tmp.path() / "hf";
  write(target / "config.json", "{}");
  const std::vector<std::string> users = {"hf.old-2024-01-15", "hf.old-2023-12-01", "hf.tmp-999999999-0",
                                          "hf.old-999999998-1"};
  for (const std::string& n : users) write(tmp.path() / n / "weights.bin", "the user's");
  make_marked(tmp.path() / "hf.tmp-999999997-5", 123);                                      // marker of another pid
  make_marked(tmp.path() / ("hf.tmp-" + std::to_string(::getppid()) + "-2"), ::getppid());  // alive
  make_marked(tmp.path() / "hf.tmp-999999999-3", 999999999);                                // ours, dead
  write(tmp.path() / "hf.tmp-999999999-3" / "dir" / "model.safetensors", "partial");
  make_marked(tmp.path() / "hf.old-999999999-4", 999999999);
  // Empty and unmarked: what a kill between the mkdir and the marker leaves; rmdir'ed.
  fs::create_directories(tmp.path() / "hf.tmp-999999999-7");

  const std::vector<std::string> removed = zt::io::remove_stale_staging(target.string());
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_FALSE(fs::exists(tmp.path() / "hf.tmp-999999999-7"));
  for (const std::string& n : users) EXPECT_EQ(read_all(tmp.path() / n / "weights.bin"), "the user's") << n;
  EXPECT_TRUE(fs::exists(tmp.path() / "hf.tmp-999999997-5"));
  EXPECT_TRUE(fs::exists(tmp.path() / ("hf.tmp-" + std::to_string(::getppid()) + "-2")));
  EXPECT_FALSE(fs::exists(tmp.path() / "hf.tmp-999999999-3"));
  EXPECT_FALSE(fs::exists(tmp.path() / "hf.old-999999999-4"));
  EXPECT_EQ(read_all(target / "config.json"), "{}");
  // A marker that is a link, or a folder that is a link to a marked one, is not ours.
  make_marked(tmp.path() / "elsewhere", 999999999);
  fs::create_directory_symlink(tmp.path() / "elsewhere", tmp.path() / "hf.tmp-999999999-6");
  EXPECT_TRUE(zt::io::remove_stale_staging(target.string()).empty());
  EXPECT_TRUE(fs::exists(tmp.path() / "elsewhere" / zt::io::kStagingMarker));
}

// write_file_atomic's temporaries are marked folders <name>.tmp-<pid>-<n>: those of dead
// processes go; files or unmarked folders of like names, a live process's, stay.
TEST(StagingDir, StaleAtomicTemporariesOfDeadProcessesAreRemoved) {
  TempDir tmp(zt::testing::build_temp_path("staging_dir_"));
  const fs::path dir = tmp.path() / "out";
  fs::create_directories(dir);
  make_marked(dir / "tokenizer.json.tmp-999999999-0", 999999999);
  write(dir / "tokenizer.json.tmp-999999999-0" / "tokenizer.json", "partial");
  make_marked(dir / "train_000000.bin.tmp-999999998-12", 999999998);
  make_marked(dir / ("latest.tmp-" + std::to_string(::getpid()) + "-3"), ::getpid());
  write(dir / "notes.tmp-999999999-0", "a file of the user's");
  write(dir / "model.tmp-999999999-0" / "w.bin", "an unmarked folder");
  write(dir / "tokenizer.json", "{}");

  std::vector<std::string> removed = zt::io::remove_stale_atomic_temps(dir.string());
  std::sort(removed.begin(), removed.end());
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(fs::path(removed[0]).filename(), "tokenizer.json.tmp-999999999-0");
  EXPECT_EQ(fs::path(removed[1]).filename(), "train_000000.bin.tmp-999999998-12");
  EXPECT_EQ(names_in(dir), (std::set<std::string>{"latest.tmp-" + std::to_string(::getpid()) + "-3",
                                                  "notes.tmp-999999999-0", "model.tmp-999999999-0", "tokenizer.json"}));
  EXPECT_TRUE(zt::io::remove_stale_atomic_temps((tmp.path() / "missing").string()).empty());
  // A completed write leaves nothing beside its file.
  zt::io::write_file_atomic((dir / "a.json").string(), [](std::FILE* f) { std::fputs("{}", f); });
  EXPECT_EQ(read_all(dir / "a.json"), "{}");
  for (const std::string& n : names_in(dir)) EXPECT_EQ(n.find("a.json.tmp"), std::string::npos) << n;
}

// A symbolic link planted at an output name is refused (exit 2) and what it points to is
// left as it was: atomic writes, plain opens for writing, appends; a FIFO is refused
// without waiting for a reader.
TEST(StagingDir, NothingIsWrittenThroughALinkOrIntoAFifo) {
  TempDir tmp(zt::testing::build_temp_path("staging_link_"));
  const fs::path victim = tmp.path() / "victim.txt";
  write(victim, "precious");
  const fs::path link = tmp.path() / "out.json";
  fs::create_symlink(victim, link);
  const auto refused = [&](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << ": not refused";
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(link.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_all(victim), "precious") << what;
    EXPECT_TRUE(fs::is_symlink(link)) << what;
  };
  refused([&] { zt::io::write_file_atomic(link.string(), [](std::FILE* f) { std::fputs("x", f); }); },
          "write_file_atomic");
  for (const zt::io::WriteOpen how : {zt::io::WriteOpen::Truncate, zt::io::WriteOpen::Append,
                                      zt::io::WriteOpen::ReadWrite, zt::io::WriteOpen::CreateNew})
    refused([&] { zt::io::open_for_write(link.string(), how); }, "open_for_write");
  refused([&] { std::fclose(zt::io::open_file_for_write(link.string(), zt::io::WriteOpen::Append)); },
          "open_file_for_write");
  // A dangling link is not followed to create its target either.
  const fs::path dangling = tmp.path() / "dangling";
  fs::create_symlink(tmp.path() / "created_through_link", dangling);
  EXPECT_THROW(zt::io::open_for_write(dangling.string(), zt::io::WriteOpen::Truncate), zt::Error);
  EXPECT_FALSE(fs::exists(tmp.path() / "created_through_link"));

  const fs::path fifo = tmp.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  try {
    zt::io::open_for_write(fifo.string(), zt::io::WriteOpen::Truncate);
    ADD_FAILURE() << "a FIFO was opened for writing";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("FIFO"), std::string::npos) << e.what();
  }
}

// The start-up probe: a folder that cannot be created (a regular file in its path, as root
// would otherwise pass any permission check) is exit 2 naming it; a fine one is created and
// left holding nothing.
TEST(StagingDir, ProbeWritableDirNamesWhatStandsInTheWay) {
  TempDir tmp(zt::testing::build_temp_path("staging_probe_"));
  write(tmp.path() / "checkpoints", "a file, not a folder");
  try {
    zt::io::probe_writable_dir((tmp.path() / "checkpoints").string(), "the run's checkpoints");
    ADD_FAILURE() << "not refused";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("checkpoints' is not a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(zt::io::probe_writable_dir((tmp.path() / "checkpoints" / "runs").string(), "logging_dir"), zt::Error);
  fs::create_symlink(tmp.path() / "missing", tmp.path() / "dangling");
  try {
    zt::io::probe_writable_dir((tmp.path() / "dangling").string(), "the run's checkpoints");
    ADD_FAILURE() << "a dangling link was not refused";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link to something missing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "missing"));
  zt::io::probe_writable_dir((tmp.path() / "a" / "b").string(), "output_dir");
  EXPECT_TRUE(fs::is_directory(tmp.path() / "a" / "b"));
  EXPECT_TRUE(fs::is_empty(tmp.path() / "a" / "b"));
  if (::geteuid() != 0) {  // permission bits bind only non-root users
    fs::create_directories(tmp.path() / "ro");
    fs::permissions(tmp.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(zt::io::probe_writable_dir((tmp.path() / "ro").string(), "output_dir"), zt::Error);
    fs::permissions(tmp.path() / "ro", fs::perms::owner_all);
  }
}
