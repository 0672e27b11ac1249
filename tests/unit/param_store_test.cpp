// zero/param_store.h: units resident in forward order up to max_in_cpu elements, the rest
// swapped; a swapped slice written back and evicted comes back unchanged (Read), Overwrite
// reads nothing from the drive; two threads acquiring and releasing the same units (as the
// engine's gathers and the host step do) see each other's newest values and never
// deadlock with fewer buffers than units; prefetch reads ahead without waiting; checkpoint
// slice I/O reads and writes element ranges of swapped slices; the swap folder goes with
// the store; a buffer_size below the largest slice warns and still works.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/param_store.h"

using namespace zt;
using namespace zt::zero;
namespace fs = std::filesystem;

namespace {

ParamNvme nvme(const fs::path& dir, int buffers, int64_t max_in_cpu) {
  ParamNvme o;
  o.nvme_path = dir.string();
  o.buffer_count = buffers;
  o.buffer_size = 1'000'000;  // above every slice: no warning; buffers still take the largest slice
  o.max_in_cpu = max_in_cpu;
  o.aio.block_size = 16 << 10;  // several pieces per slice
  return o;
}

// Slices of 3000, 5000, 777, 4096 and 2500 f32 elements (not multiples of the alignment).
const std::vector<int64_t> kSizes{3000, 5000, 777, 4096, 2500};

void add_units(ParamStore& store) {
  for (int64_t n : kSizes) store.add_unit(n, DType::F32);
  store.layout_done();
}

float value(size_t unit, int version, int64_t i) {
  return static_cast<float>(unit * 100000 + static_cast<size_t>(version) * 10000) + 0.5f * static_cast<float>(i);
}

void fill(ParamStore& store, size_t unit, int version) {
  const Tensor t = store.acquire(unit, ParamIntent::Overwrite);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = value(unit, version, i);
  store.release(unit, ParamChange::Modified);
}

// The number of elements of the unit's slice that differ from `version`.
int64_t mismatches(ParamStore& store, size_t unit, int version) {
  const Tensor t = store.acquire(unit, ParamIntent::Read);
  int64_t bad = 0;
  for (int64_t i = 0; i < t.numel(); ++i) bad += t.data_as<float>()[i] != value(unit, version, i);
  store.release(unit, ParamChange::Clean);
  return bad;
}

}  // namespace

TEST(ParamStore, WithoutNvmeEveryUnitIsResident) {
  ParamStore store(Pinning::Pageable, std::nullopt, 0);
  add_units(store);
  EXPECT_EQ(store.layout().resident_units, kSizes.size());
  EXPECT_TRUE(store.layout().swap_file.empty());
  for (size_t u = 0; u < kSizes.size(); ++u) {
    EXPECT_TRUE(store.resident(u));
    EXPECT_EQ(store.slice_io(u), nullptr);
    // The resident slice is its own view, 64-byte aligned.
    EXPECT_EQ(store.acquire(u, ParamIntent::Read).data(), store.shape(u).data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(store.shape(u).data()) % 64, 0u);
    store.release(u, ParamChange::Clean);
    EXPECT_FALSE(store.prefetch(u));
  }
}

TEST(ParamStore, MaxInCpuKeepsTheFirstUnitsAndSwapsTheRest) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  // 3000 + 5000 fit 8000; 777 would too, but the resident units are a prefix in forward order.
  // A buffer_size below the largest swapped slice warns once, naming the key; the buffers
  // take the slice's size anyway.
  ParamNvme small_buffers = nvme(dir.path(), 2, 8500);
  small_buffers.buffer_size = 1000;
  ParamStore store(Pinning::Pageable, small_buffers, 3);
  ::testing::internal::CaptureStderr();
  add_units(store);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("offload_param.buffer_size 1000 elements is smaller than the largest swapped parameter slice "
                     "(4096 elements)"),
            std::string::npos)
      << log;
  const ParamStoreLayout& l = store.layout();
  EXPECT_EQ(l.resident_units, 2u);
  EXPECT_EQ(l.resident_elements, 8000);
  EXPECT_EQ(l.swapped_elements, 777 + 4096 + 2500);
  EXPECT_EQ(l.swap_buffers, 2);
  EXPECT_EQ(l.swap_buffer_bytes, 2u * 16384);  // the largest swapped slice, 4096 f32, each
  EXPECT_NE(l.swap_file.find("rank3-params"), std::string::npos) << l.swap_file;
  EXPECT_TRUE(fs::exists(l.swap_file));
  for (size_t u = 0; u < kSizes.size(); ++u) {
    EXPECT_EQ(store.resident(u), u < 2) << u;
    EXPECT_EQ(store.shape(u).has_data(), u < 2) << u;
    EXPECT_EQ(store.shape(u).numel(), kSizes[u]);
  }
  // max_in_cpu 0: everything on the drive.
  ParamStore all(Pinning::Pageable, nvme(dir.path(), 2, 0), 0);
  add_units(all);
  EXPECT_EQ(all.layout().resident_units, 0u);
  EXPECT_EQ(all.layout().resident_bytes, 0u);
}

TEST(ParamStore, SwappedSlicesSurviveEvictionAndOverwriteReadsNothing) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  ParamStore store(Pinning::Pageable, nvme(dir.path(), 2, 0), 0);
  add_units(store);
  for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, 1);
  store.flush();
  const SwapTraffic after_fill = store.traffic();
  EXPECT_EQ(after_fill.read_bytes, 0u) << "Overwrite reads nothing";
  EXPECT_GT(after_fill.written_bytes, 0u);
  // Five units through two buffers: every one but the last two comes back from the drive.
  for (size_t u = 0; u < kSizes.size(); ++u) EXPECT_EQ(mismatches(store, u, 1), 0) << u;
  EXPECT_GT(store.traffic().read_bytes, 0u);
  // A partial update (Read, then Modified) keeps the rest.
  {
    const Tensor t = store.acquire(0, ParamIntent::Read);
    t.data_as<float>()[7] = -1.0f;
    store.release(0, ParamChange::Modified);
  }
  for (size_t u = 1; u < kSizes.size(); ++u) EXPECT_EQ(mismatches(store, u, 1), 0) << u;  // evicts unit 0
  const Tensor t = store.acquire(0, ParamIntent::Read);
  EXPECT_EQ(t.data_as<float>()[7], -1.0f);
  EXPECT_EQ(t.data_as<float>()[8], value(0, 1, 8));
  store.release(0, ParamChange::Clean);
}

TEST(ParamStore, PrefetchReadsAheadWithoutWaiting) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  ParamStore store(Pinning::Pageable, nvme(dir.path(), 3, 0), 0);
  add_units(store);
  for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, 2);
  store.flush();
  // Evict the first units (the last three are in the buffers), then read them ahead.
  const uint64_t before = store.traffic().read_bytes;
  EXPECT_TRUE(store.prefetch(0));
  EXPECT_TRUE(store.prefetch(0)) << "already coming";
  EXPECT_TRUE(store.prefetch(1));
  EXPECT_FALSE(store.prefetch(2)) << "the last buffer stays for an acquire";
  EXPECT_GT(store.traffic().read_bytes, before);
  const uint64_t prefetched = store.traffic().read_bytes;
  EXPECT_EQ(mismatches(store, 0, 2), 0);
  EXPECT_EQ(mismatches(store, 1, 2), 0);
  EXPECT_EQ(store.traffic().read_bytes, prefetched) << "the acquires found them in memory";
}

// The compute thread reads units in forward order (the gathers) while the worker rewrites
// them in the same order (the host step), ordered per unit as before_params_used and the
// step order them: a unit's read of step s waits for its write of step s, and its write of
// step s + 1 waits for that read (a resident slice has no other protection). With 1-3
// buffers for 4 swapped units every read sees exactly that step's values.
TEST(ParamStore, TwoThreadsAcquireAndReleaseConcurrently) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  for (int buffers : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(buffers) + " buffers");
    ParamStore store(Pinning::Pageable, nvme(dir.path(), buffers, 3000), 0);  // unit 0 resident
    add_units(store);
    for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, 0);
    constexpr int kSteps = 8;
    std::vector<std::atomic<int>> written(kSizes.size()), read(kSizes.size());
    for (size_t u = 0; u < kSizes.size(); ++u) written[u] = read[u] = 0;
    std::atomic<int64_t> bad{0};
    std::thread worker([&] {
      for (int step = 1; step <= kSteps; ++step)
        for (size_t u = 0; u < kSizes.size(); ++u) {
          while (read[u].load() < step - 1) std::this_thread::yield();
          fill(store, u, step);
          written[u] = step;
        }
    });
    for (int step = 1; step <= kSteps; ++step)
      for (size_t u = 0; u < kSizes.size(); ++u) {
        while (written[u].load() < step) std::this_thread::yield();
        bad += mismatches(store, u, step);
        read[u] = step;
        store.prefetch((u + 1) % kSizes.size());
      }
    worker.join();
    EXPECT_EQ(bad.load(), 0);
    store.flush();
    for (size_t u = 0; u < kSizes.size(); ++u) EXPECT_EQ(mismatches(store, u, kSteps), 0) << u;
  }
}

// A swapped slice is held by one thread at a time: with the worker rewriting every unit
// as fast as it can (no ordering at all), each read sees one whole version, never a mix.
TEST(ParamStore, SwappedSlicesAreNeverTornWhileTheOtherThreadRewritesThem) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  for (int buffers : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(buffers) + " buffers");
    ParamStore store(Pinning::Pageable, nvme(dir.path(), buffers, 0), 0);
    add_units(store);
    for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, 0);
    constexpr int kVersions = 9;
    std::atomic<int64_t> bad{0};
    std::thread worker([&] {
      for (int v = 1; v <= kVersions; ++v)
        for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, v);
    });
    for (int pass = 0; pass < 3 * kVersions; ++pass)
      for (size_t u = 0; u < kSizes.size(); ++u) {
        const Tensor t = store.acquire(u, ParamIntent::Read);
        const auto v = static_cast<int>((t.data_as<float>()[0] - static_cast<float>(u * 100000)) / 10000.0f);
        bad += v < 0 || v > kVersions;
        for (int64_t i = 0; i < t.numel(); ++i) bad += t.data_as<float>()[i] != value(u, v, i);
        store.release(u, ParamChange::Clean);
        store.prefetch((u + 1) % kSizes.size());
      }
    worker.join();
    EXPECT_EQ(bad.load(), 0);
    store.flush();
    for (size_t u = 0; u < kSizes.size(); ++u) EXPECT_EQ(mismatches(store, u, kVersions), 0) << u;
  }
}

TEST(ParamStore, CheckpointSliceIoReadsAndWritesRanges) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  ParamStore store(Pinning::Pageable, nvme(dir.path(), 2, 0), 0);
  add_units(store);
  for (size_t u = 0; u < kSizes.size(); ++u) fill(store, u, 3);
  const std::shared_ptr<SliceIo> io = store.slice_io(1);
  ASSERT_NE(io, nullptr);
  OwnedTensor part({100}, DType::F32);
  io->read(1234, part);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(part->data_as<float>()[i], value(1, 3, 1234 + i));
  // A range written (a resume's overlap with one saved rank) keeps the rest of the slice.
  for (int64_t i = 0; i < 100; ++i) part->data_as<float>()[i] = -static_cast<float>(i);
  io->write(10, part);
  for (size_t u = 2; u < kSizes.size(); ++u) EXPECT_EQ(mismatches(store, u, 3), 0);  // unit 1 evicted
  OwnedTensor whole({kSizes[1]}, DType::F32);
  io->read(0, whole);
  for (int64_t i = 0; i < kSizes[1]; ++i)
    ASSERT_EQ(whole->data_as<float>()[i], i >= 10 && i < 110 ? -static_cast<float>(i - 10) : value(1, 3, i)) << i;
  // The whole slice written (Overwrite).
  for (int64_t i = 0; i < kSizes[1]; ++i) whole->data_as<float>()[i] = value(1, 9, i);
  io->write(0, whole);
  EXPECT_EQ(mismatches(store, 1, 9), 0);
  OwnedTensor wrong({10}, DType::BF16);
  EXPECT_THROW(io->read(0, wrong), Error);
}

TEST(ParamStore, SwapFolderGoesWithTheStoreAndBadPathsAreNamed) {
  zt::testing::TempDir dir(zt::testing::swap_temp_path("params_"));
  std::string file;
  {
    ParamStore store(Pinning::Pageable, nvme(dir.path(), 2, 0), 0);
    add_units(store);
    file = store.layout().swap_file;
    fill(store, 0, 1);  // a write-back in flight at destruction
    EXPECT_TRUE(fs::exists(file));
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(fs::is_empty(dir.path())) << "the swap folder went with the file";
  // An nvme_path that cannot be a folder: BadInput naming it.
  { std::ofstream(dir.path() / "a-file") << "x"; }
  const std::string bad = (dir.path() / "a-file" / "swap").string();
  ParamStore store(Pinning::Pageable, nvme(fs::path(bad), 2, 0), 0);
  for (int64_t n : kSizes) store.add_unit(n, DType::F32);
  try {
    store.layout_done();
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}
