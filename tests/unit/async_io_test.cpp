// io/direct_file.h and io/async_io.h: O_DIRECT files (buffered where refused, saying why), and
// both asynchronous engines (threads always; io_uring where the build and kernel have it)
// moving data unchanged through many pieces in flight, with registered buffers, short
// files and bad folders reported by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/async_io.h"
#include "io/direct_file.h"

using namespace zt;
using namespace zt::io;
namespace fs = std::filesystem;

namespace {

std::vector<IoEngine> engines() {
  std::vector<IoEngine> e = {IoEngine::Threads};
  if (uring_usable()) e.push_back(IoEngine::Uring);
  return e;
}

void fill_pattern(AlignedBuffer& b, uint32_t seed) {
  auto* p = static_cast<uint32_t*>(b.data());
  for (size_t i = 0; i < b.bytes() / 4; ++i) p[i] = static_cast<uint32_t>(i * 2654435761u) ^ seed;
}

}  // namespace

TEST(DirectFile, OpensDirectAndFallsBackToBufferedSayingWhy) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("dio_"));
  DirectFile disk(dir.file("a.swp"), FileAccess::ReadWrite);
  // The build tree is on a disk filesystem here (ext4/xfs take O_DIRECT); a tmpfs falls back.
  if (disk.mode() == IoMode::Buffered) std::printf("[note] %s\n", disk.fallback_reason().c_str());
  if (fs::is_directory("/dev/shm")) {
    const std::string shm = "/dev/shm/zt_dio_" + std::to_string(::getpid());
    {
      DirectFile mem(shm, FileAccess::ReadWrite);
      // tmpfs takes O_DIRECT since Linux 6.6; older kernels refuse it and the file is buffered.
      if (mem.mode() == IoMode::Buffered) {
        EXPECT_NE(mem.fallback_reason().find("does not support O_DIRECT"), std::string::npos);
      } else {
        EXPECT_EQ(mem.fallback_reason(), "");
      }
      AlignedBuffer b(8192);
      fill_pattern(b, 7);
      mem.write_at(b.data(), b.bytes(), 0);
      AlignedBuffer c(8192);
      mem.read_at(c.data(), c.bytes(), 0);
      EXPECT_EQ(std::memcmp(b.data(), c.data(), b.bytes()), 0);
    }
    fs::remove(shm);
  }
}

TEST(DirectFile, BadFoldersAndFullDrivesAreNamed) {
  try {
    DirectFile f("/nonexistent-zt-folder/x.swp", FileAccess::Write);
    FAIL() << "opened a file in a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-zt-folder"), std::string::npos) << e.what();
  }
  zt::testing::TempDir dir(zt::testing::build_temp_path("dio_"));
  DirectFile f(dir.file("big.swp"), FileAccess::ReadWrite);
  try {
    f.reserve(uint64_t{1} << 60);  // an exabyte: no drive here holds it
    FAIL() << "reserved an exabyte";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("free on the drive"), std::string::npos) << e.what();
  }
  f.reserve(1 << 20);
  EXPECT_EQ(fs::file_size(dir.file("big.swp")), 1u << 20);
}

TEST(AsyncIo, ManyTransfersInFlightRoundTrip) {
  for (IoEngine engine : engines()) {
    SCOPED_TRACE(io_engine_name(engine));
    zt::testing::TempDir dir(zt::testing::build_temp_path("aio_"));
    AioOptions o;
    o.engine = engine;
    o.block_size = 64 << 10;
    o.queue_depth = 4;
    o.thread_count = 2;
    AsyncIo io(o);
    EXPECT_EQ(io.engine(), engine);
    DirectFile f(dir.file("state.swp"), FileAccess::ReadWrite);
    constexpr size_t kChunk = 640 << 10;  // 10 pieces each
    constexpr int kChunks = 6;
    f.reserve(kChunk * kChunks);
    std::vector<AlignedBuffer> out, in;
    std::vector<IoTicket> tickets;
    for (int i = 0; i < kChunks; ++i) {
      out.emplace_back(kChunk);
      fill_pattern(out.back(), static_cast<uint32_t>(i));
      tickets.push_back(io.write(f, out.back().data(), kChunk, kChunk * static_cast<size_t>(i)));
    }
    // Waited out of order: each ticket completes on its own.
    for (int i = kChunks - 1; i >= 0; --i) io.wait(tickets[static_cast<size_t>(i)]);
    tickets.clear();
    for (int i = 0; i < kChunks; ++i) {
      in.emplace_back(kChunk);
      tickets.push_back(io.read(f, in.back().data(), kChunk, kChunk * static_cast<size_t>(i)));
    }
    io.wait_all();
    for (int i = 0; i < kChunks; ++i)
      EXPECT_EQ(std::memcmp(out[static_cast<size_t>(i)].data(), in[static_cast<size_t>(i)].data(), kChunk), 0)
          << "chunk " << i;
  }
}

TEST(AsyncIo, RegisteredBuffersAndOneByOneSubmission) {
  for (IoEngine engine : engines()) {
    SCOPED_TRACE(io_engine_name(engine));
    zt::testing::TempDir dir(zt::testing::build_temp_path("aio_"));
    AioOptions o;
    o.engine = engine;
    o.block_size = 32 << 10;
    o.queue_depth = 2;
    o.single_submit = true;
    o.overlap_events = false;
    AsyncIo io(o);
    AlignedBuffer a(1 << 20), b(1 << 20);
    const bool registered = io.register_buffer(a.data(), a.bytes()) && io.register_buffer(b.data(), b.bytes());
    if (engine == IoEngine::Threads) {
      EXPECT_FALSE(registered);
    }
    fill_pattern(a, 99);
    DirectFile f(dir.file("p.swp"), FileAccess::ReadWrite);
    io.wait(io.write(f, a.data(), a.bytes(), 4096));
    // A read of a piece inside the registered buffer at an offset into it.
    io.wait(io.read(f, static_cast<char*>(b.data()) + 4096, a.bytes() - 4096, 4096));
    EXPECT_EQ(std::memcmp(a.data(), static_cast<char*>(b.data()) + 4096, a.bytes() - 4096), 0);
  }
}

TEST(AsyncIo, ReadingPastTheEndNamesTheFileAndOffset) {
  for (IoEngine engine : engines()) {
    SCOPED_TRACE(io_engine_name(engine));
    zt::testing::TempDir dir(zt::testing::build_temp_path("aio_"));
    AioOptions o;
    o.engine = engine;
    AsyncIo io(o);
    DirectFile f(dir.file("short.swp"), FileAccess::ReadWrite);
    f.reserve(8192);
    AlignedBuffer b(16384);
    const IoTicket t = io.read(f, b.data(), b.bytes(), 0);
    try {
      io.wait(t);
      FAIL() << "read 16 KiB of an 8 KiB file";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Io);
      EXPECT_NE(std::string(e.what()).find("short.swp"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("end of file"), std::string::npos) << e.what();
    }
    // The engine goes on working after a failure.
    io.wait(io.read(f, b.data(), 8192, 0));
  }
}
