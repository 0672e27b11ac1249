// zero/state_store.h's NvmeStore: fresh state reads as zeros; a unit's state written back
// and evicted comes back from the swap file unchanged, with fewer buffers than units and
// with pipelined reads and writes; checkpoint slice I/O reads and writes in place at any
// offset; the swap folder goes with the store, dead processes' folders are removed at
// start, a missing nvme_path is created and one that cannot be is a BadInput naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/output_file.h"
#include "zero/state_store.h"

using namespace zt;
using namespace zt::zero;
namespace fs = std::filesystem;

namespace {

NvmeStoreOptions options(const fs::path& dir, int buffers, bool pipelined) {
  NvmeStoreOptions o;
  o.nvme_path = dir.string();
  o.buffer_count = buffers;
  o.pipeline_read = o.pipeline_write = pipelined;
  o.aio.block_size = 16 << 10;  // several pieces per unit
  return o;
}

float value(size_t unit, int which, int64_t i) { return static_cast<float>(unit * 1000 + which * 100) + 0.25f * i; }

}  // namespace

TEST(NvmeStore, StateSurvivesEvictionThroughTheSwapFile) {
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "serial");
    zt::testing::TempDir dir(zt::testing::swap_temp_path("nvme_"));
    std::string swap;
    {
      NvmeStore store(options(dir.path(), 2, pipelined));
      const int64_t sizes[] = {5000, 12345, 777};  // not multiples of the alignment
      for (size_t u = 0; u < 3; ++u) store.add_unit(u, UnitStateShape{sizes[u], DType::F32, u != 1, 2, Device::cpu()});
      store.layout_done();
      swap = store.swap_file();
      EXPECT_TRUE(fs::exists(swap));
      for (size_t u = 0; u < 3; ++u) {
        store.prefetch((u + 1) % 3);
        UnitStateViews v = store.acquire(u);
        ASSERT_EQ(v.state.size(), 2u);
        EXPECT_EQ(v.master.has_data(), u != 1);
        for (int s = 0; s < 2; ++s) {
          for (int64_t i = 0; i < sizes[u]; ++i) {
            ASSERT_EQ(v.state[static_cast<size_t>(s)].data_as<float>()[i], 0.0f) << "fresh state is zero";
            v.state[static_cast<size_t>(s)].data_as<float>()[i] = value(u, s, i);
          }
        }
        if (u != 1) {
          for (int64_t i = 0; i < sizes[u]; ++i) v.master.data_as<float>()[i] = value(u, 9, i);
        }
        store.release(u, StateAccess::Modified);
      }
      // Two rounds over three units with two buffers: every unit is evicted and read back.
      for (int round = 0; round < 2; ++round) {
        for (size_t u = 0; u < 3; ++u) {
          UnitStateViews v = store.acquire(u);
          for (int s = 0; s < 2; ++s)
            for (int64_t i = 0; i < sizes[u]; ++i)
              ASSERT_EQ(v.state[static_cast<size_t>(s)].data_as<float>()[i], value(u, s, i)) << "unit " << u;
          if (u != 1) {
            EXPECT_EQ(v.master.data_as<float>()[sizes[u] - 1], value(u, 9, sizes[u] - 1));
          }
          store.release(u, StateAccess::Read);
        }
      }
      EXPECT_GT(store.traffic().read_bytes, 0u);
      EXPECT_GT(store.traffic().written_bytes, 0u);
      EXPECT_EQ(store.memory_bytes() % 4096, 0u);

      // Checkpoint slice I/O: reads at an offset, writes in place (seen by the next acquire).
      const auto io = store.slice_io(1, 1);
      OwnedTensor part({100}, DType::F32);
      io->read(1234, part);
      for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(part.data<float>()[i], value(1, 1, 1234 + i));
      for (int64_t i = 0; i < 100; ++i) part.data<float>()[i] = -1.0f - static_cast<float>(i);
      io->write(4321, part);
      UnitStateViews v = store.acquire(1);
      EXPECT_EQ(v.state[1].data_as<float>()[4320], value(1, 1, 4320));
      EXPECT_EQ(v.state[1].data_as<float>()[4321], -1.0f);
      EXPECT_EQ(v.state[1].data_as<float>()[4420], -100.0f);
      EXPECT_EQ(v.state[1].data_as<float>()[4421], value(1, 1, 4421));
      store.release(1, StateAccess::Read);
    }
    EXPECT_FALSE(fs::exists(swap)) << "the swap file goes with the store";
    EXPECT_FALSE(fs::exists(fs::path(swap).parent_path()));
  }
}

TEST(NvmeStore, DeadProcessesSwapFoldersAreRemovedAndBadPathsNamed) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("nvme_"));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // pid 2^22 + 1 is above Linux's pid_max limit: no such process.
  const fs::path dead = dir.path() / ("zerotrain-" + std::string(host) + "-4194305");
  const fs::path alive = dir.path() / ("zerotrain-" + std::string(host) + "-" + std::to_string(::getppid()));
  const fs::path other = dir.path() / "zerotrain-otherhost-4194305";
  // A folder of the same name without zerotrain's marker (io/output_file.h) is not ours.
  const fs::path unmarked = dir.path() / ("zerotrain-" + std::string(host) + "-4194306");
  const auto marker = [](const fs::path& p, const std::string& pid) {
    std::ofstream(p / zt::io::kStagingMarker) << "zerotrain staging folder\npid " << pid << "\n";
  };
  for (const fs::path& p : {dead, alive, other, unmarked}) {
    fs::create_directories(p);
    std::ofstream(p / "rank0-optimizer.swp") << "x";
  }
  marker(dead, "4194305");
  marker(alive, std::to_string(::getppid()));
  marker(other, "4194305");
  {
    NvmeStore store(options(dir.path(), 1, false));
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(alive)) << "a live process's folder stays";
    EXPECT_TRUE(fs::exists(other)) << "another machine's folder stays (a shared path)";
    EXPECT_TRUE(fs::exists(unmarked / "rank0-optimizer.swp")) << "a folder without the marker stays";
  }
  // A missing nvme_path is created (as DeepSpeed does); one under a file cannot be.
  {
    NvmeStore made(options(dir.path() / "new" / "nvme", 1, false));
    EXPECT_TRUE(fs::is_directory(dir.path() / "new" / "nvme"));
  }
  std::ofstream(dir.path() / "a-file") << "x";
  const fs::path impossible = dir.path() / "a-file" / "nvme";
  try {
    NvmeStore bad(options(impossible, 1, false));
    FAIL() << "opened a store under a file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(impossible.string()), std::string::npos) << e.what();
  }
}
