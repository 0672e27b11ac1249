#include "cli/bench_io.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/subprocess.h"
#include "io/async_io.h"
#include "io/direct_file.h"
#include "io/safetensors.h"

namespace zt::cli {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

struct IoRow {
  std::string engine;
  size_t block = 0;
  int queue_depth = 0, threads = 0;
  double write_gbs = 0, read_gbs = 0;
};

// The test file, removed however the run ends.
class ScratchFile {
 public:
  explicit ScratchFile(std::string path) : path_(std::move(path)) {}
  ~ScratchFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string size_text(size_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// GB/s of a `dd` line ("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.52 s, 2.1 GB/s"),
// computed from its bytes and seconds; 0 when dd is missing or failed. dd runs from an
// argument vector (core/subprocess.h): the scratch path is never read by a shell.
double run_dd(const std::vector<std::string>& operands, std::string* note) {
  std::vector<std::string> argv{"dd"};
  argv.insert(argv.end(), operands.begin(), operands.end());
  const ProgramResult r = run_program(argv);
  const std::string& out = r.output;
  if (r.ended == ProgramResult::Ended::NotStarted) {
    if (note) *note = "dd " + r.describe();
    return 0;
  }
  const bool failed = !r.ok();
  const size_t copied = out.rfind(" copied, ");
  if (failed || copied == std::string::npos) {
    if (note) *note = out.substr(0, out.find('\n'));
    return 0;
  }
  const size_t line = out.rfind('\n', copied);
  const double bytes = std::strtod(out.c_str() + (line == std::string::npos ? 0 : line + 1), nullptr);
  const double secs = std::strtod(out.c_str() + copied + 9, nullptr);
  return secs > 0 ? bytes / secs / 1e9 : 0;
}

// Moves the whole file once through `io` in transfers of `chunk` bytes, all queued at
// once (the engine keeps queue_depth x threads pieces in flight); GB/s.
double sweep_pass(io::AsyncIo& aio, const io::DirectFile& file, io::AlignedBuffer& buffer, size_t size, bool write) {
  const auto t0 = Clock::now();
  for (size_t at = 0; at < size; at += buffer.bytes()) {
    const size_t n = std::min(buffer.bytes(), size - at);
    if (write)
      aio.write(file, buffer.data(), n, at);
    else
      aio.read(file, buffer.data(), n, at);
  }
  aio.wait_all();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(size) / secs / 1e9;
}

// Read and write at the same time, as pipelined swapping does (the next sub-group read while
// the last one is written back): one engine reads `read_file` while another writes
// `write_file`, each on its own thread with the same settings; GB/s of each side.
struct MixedRates {
  double read_gbs = 0, write_gbs = 0;
};
MixedRates mixed_pass(const io::AioOptions& a, const io::DirectFile& read_file, const io::DirectFile& write_file,
                      size_t size) {
  MixedRates rates;
  const auto side = [&](const io::DirectFile& file, bool write, double* gbs) {
    io::AsyncIo aio(a);
    io::AlignedBuffer buffer(std::min(size, a.block_size * 32));
    aio.register_buffer(buffer.data(), buffer.bytes());
    *gbs = sweep_pass(aio, file, buffer, size, write);
  };
  std::thread writer(side, std::cref(write_file), true, &rates.write_gbs);
  side(read_file, false, &rates.read_gbs);
  writer.join();
  return rates;
}

// dd reading one file while another dd writes a second one: the raw baseline of mixed traffic.
MixedRates mixed_dd(const std::string& read_path, const std::string& write_path, size_t size) {
  MixedRates rates;
  std::thread writer([&] {
    rates.write_gbs = run_dd({"if=/dev/zero", "of=" + write_path, "bs=1M", "count=" + std::to_string(size >> 20),
                              "oflag=direct", "conv=notrunc"},
                             nullptr);
  });
  rates.read_gbs = run_dd({"if=" + read_path, "of=/dev/null", "bs=1M", "iflag=direct"}, nullptr);
  writer.join();
  return rates;
}

void write_json(const std::string& path, const IoBenchOptions& o, const std::vector<IoRow>& rows, double dd_write,
                double dd_read, io::IoMode mode, const MixedRates& mixed, const MixedRates& mixed_dd_rates) {
  nlohmann::ordered_json doc;
  doc["tool"] = "zerotrain";
  doc["path"] = o.path;
  doc["bytes"] = o.size;
  doc["o_direct"] = mode == io::IoMode::Direct;
  doc["dd_write_gbs"] = dd_write;
  doc["dd_read_gbs"] = dd_read;
  doc["mixed"] = {{"read_gbs", mixed.read_gbs},
                  {"write_gbs", mixed.write_gbs},
                  {"dd_read_gbs", mixed_dd_rates.read_gbs},
                  {"dd_write_gbs", mixed_dd_rates.write_gbs}};
  auto& out = doc["rows"] = nlohmann::ordered_json::array();
  for (const IoRow& r : rows)
    out.push_back({{"engine", r.engine},
                   {"block_size", r.block},
                   {"queue_depth", r.queue_depth},
                   {"thread_count", r.threads},
                   {"write_gbs", r.write_gbs},
                   {"read_gbs", r.read_gbs}});
  io::write_file_atomic(path, [&](std::FILE* f) { std::fputs((doc.dump(2) + "\n").c_str(), f); });
}

}  // namespace

int run_io_bench(const IoBenchOptions& o) {
  if (!fs::is_directory(o.path)) ZT_THROW_INPUT("--path ", o.path, ": not a folder; create it (on the drive to test)");
  const uint64_t free = io::free_bytes(o.path);
  // Two files: the mixed pass reads one while it writes the other.
  if (free < 2 * o.size + (64 << 20))
    ZT_THROW_INPUT("--path ", o.path, ": ", free >> 20, " MiB free, the test needs twice --size (", o.size >> 20,
                   " MiB); lower --size or free space there");
  const size_t size = io::round_up_to_direct(o.size);
  const std::string stem = (fs::path(o.path) / ("zerotrain-bench-io-" + std::to_string(::getpid()))).string();
  ScratchFile scratch(stem + ".tmp");
  ScratchFile second(stem + "-mixed.tmp");

  std::printf("# zerotrain bench io: %s, %s per pass\n", o.path.c_str(), size_text(size).c_str());
  double dd_write = 0, dd_read = 0;
  if (o.dd) {
    // dd first: it also creates the file the sweep rewrites.
    const std::string count = std::to_string(size >> 20);
    std::string why;
    dd_write = run_dd({"if=/dev/zero", "of=" + scratch.path(), "bs=1M", "count=" + count, "oflag=direct"}, &why);
    dd_read = dd_write > 0 ? run_dd({"if=" + scratch.path(), "of=/dev/null", "bs=1M", "iflag=direct"}, &why) : 0;
    if (dd_write > 0 && dd_read > 0)
      std::printf("# dd bs=1M oflag=direct: write %.2f GB/s; iflag=direct: read %.2f GB/s\n", dd_write, dd_read);
    else
      std::printf("# dd could not run (%s): no baseline\n", why.empty() ? "not installed?" : why.c_str());
  }
  io::DirectFile file(scratch.path(), io::FileAccess::ReadWrite);
  file.reserve(size);
  if (file.mode() == io::IoMode::Buffered)
    ZT_WARN(file.fallback_reason(), ": the sweep runs buffered, through the page cache (reads measure memory)");

  std::printf("%-9s %8s %6s %8s %10s %10s %8s %8s\n", "engine", "block", "depth", "threads", "write GB/s",
              "read GB/s", "w/dd", "r/dd");
  std::vector<IoRow> rows;
  for (size_t block : o.block_sizes) {
    for (int depth : o.queue_depths) {
      for (int threads : o.threads) {
        io::AioOptions a;
        a.block_size = block;
        a.queue_depth = depth;
        a.thread_count = threads;
        a.engine = o.engine;
        io::AsyncIo aio(a);
        // Transfers of 32 pieces: the queue always has work while the drive is busy.
        io::AlignedBuffer buffer(std::min(size, block * 32));
        aio.register_buffer(buffer.data(), buffer.bytes());
        IoRow r{io::io_engine_name(aio.engine()), block, depth, threads, 0, 0};
        r.write_gbs = sweep_pass(aio, file, buffer, size, true);
        r.read_gbs = sweep_pass(aio, file, buffer, size, false);
        const auto ratio = [](double a, double b) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "%.2f", a / b);
          return b > 0 ? std::string(buf) : std::string("-");
        };
        std::printf("%-9s %8s %6d %8d %10.2f %10.2f %8s %8s\n", r.engine.c_str(), size_text(block).c_str(), depth,
                    threads, r.write_gbs, r.read_gbs, ratio(r.write_gbs, dd_write).c_str(),
                    ratio(r.read_gbs, dd_read).c_str());
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  const auto best_read = *std::max_element(rows.begin(), rows.end(),
                                           [](const IoRow& a, const IoRow& b) { return a.read_gbs < b.read_gbs; });
  const auto best_write = *std::max_element(rows.begin(), rows.end(),
                                            [](const IoRow& a, const IoRow& b) { return a.write_gbs < b.write_gbs; });
  // The swap reads and writes about as much: the best sum is the one to run with.
  const auto best = *std::max_element(rows.begin(), rows.end(), [](const IoRow& a, const IoRow& b) {
    return a.read_gbs + a.write_gbs < b.read_gbs + b.write_gbs;
  });
  const auto describe = [](const IoRow& r) {
    return "block " + size_text(r.block) + ", queue_depth " + std::to_string(r.queue_depth) + ", threads " +
           std::to_string(r.threads);
  };
  std::printf("best read  %.2f GB/s (%s)", best_read.read_gbs, describe(best_read).c_str());
  if (dd_read > 0) std::printf(", %.2fx dd", best_read.read_gbs / dd_read);
  std::printf("\nbest write %.2f GB/s (%s)", best_write.write_gbs, describe(best_write).c_str());
  if (dd_write > 0) std::printf(", %.2fx dd", best_write.write_gbs / dd_write);

  // The settings chosen, reading and writing at once (what pipelined swapping does).
  io::DirectFile other(second.path(), io::FileAccess::ReadWrite);
  other.reserve(size);
  io::AioOptions chosen;
  chosen.block_size = best.block;
  chosen.queue_depth = best.queue_depth;
  chosen.thread_count = best.threads;
  chosen.engine = o.engine;
  const MixedRates mixed = mixed_pass(chosen, file, other, size);
  MixedRates mixed_dd_rates;
  if (dd_read > 0 && dd_write > 0) mixed_dd_rates = mixed_dd(scratch.path(), second.path(), size);
  std::printf("\nread and write at once (%s): read %.2f + write %.2f = %.2f GB/s", describe(best).c_str(),
              mixed.read_gbs, mixed.write_gbs, mixed.read_gbs + mixed.write_gbs);
  if (mixed_dd_rates.read_gbs > 0 && mixed_dd_rates.write_gbs > 0)
    std::printf("; two dd at once: read %.2f + write %.2f = %.2f GB/s", mixed_dd_rates.read_gbs,
                mixed_dd_rates.write_gbs, mixed_dd_rates.read_gbs + mixed_dd_rates.write_gbs);
  std::printf("\nfor your ds_config (best read + write: %.2f + %.2f GB/s):\n", best.read_gbs, best.write_gbs);
  std::printf(
      "  \"aio\": {\"block_size\": %zu, \"queue_depth\": %d, \"intra_op_parallelism\": %d, \"single_submit\": false, "
      "\"overlap_events\": true}\n",
      best.block, best.queue_depth, best.threads);
  if (!o.json_path.empty()) write_json(o.json_path, o, rows, dd_write, dd_read, file.mode(), mixed, mixed_dd_rates);
  return 0;
}

}  // namespace zt::cli
