// The measurement of `zerotrain bench comm` (bench_comm.h): buffers with a known pattern,
// the timed loop, the check, the max over ranks. The table and JSON are bench_comm_report.cpp.
#include "cli/bench_comm.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>

#include "backend/cuda_api.h"
#include "cli/args.h"
#include "cli/bench_comm_report.h"
#include "core/error.h"
#include "core/fail_point.h"
#include "core/tensor.h"
#include "comm/world.h"

namespace zt::cli {

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllGather:
      return "all_gather";
  }
  return "?";
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> ops{Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather};
  return ops;
}

std::vector<Collective> parse_collectives(const std::string& flag, const std::string& list) {
  std::vector<Collective> ops;
  std::vector<std::string> names;
  for (const Collective op : all_collectives()) names.push_back(collective_name(op));
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      const std::string best = closest(name, names);
      ZT_THROW_INPUT(flag, ": unknown collective '", name, "'",
                     best.empty() ? std::string() : " (did you mean " + best + "?)",
                     "; choose from all_reduce, reduce_scatter, all_gather (comma-separated)");
    }
    const Collective op = all_collectives()[static_cast<size_t>(it - names.begin())];
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    start = comma + 1;
  }
  return ops;
}

size_t parse_byte_size(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // 64KB, 64MiB: the same
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
  const std::map<std::string, int> shifts{{"", 0}, {"B", 0}, {"K", 10}, {"M", 20}, {"G", 30}};
  const auto shift = shifts.find(unit);
  // Up to 2^40 bytes: far beyond any buffer, and no overflow below.
  if (digits == 0 || digits > 12 || shift == shifts.end()) {
    ZT_THROW_INPUT(flag, " expects a byte size such as 4096, 64K, 16M or 1G, got '", text, "'");
  }
  const size_t bytes = static_cast<size_t>(std::stoull(text.substr(0, digits))) << shift->second;
  if (bytes == 0) ZT_THROW_INPUT(flag, " must be at least 1 byte, got '", text, "'");
  if (bytes > (size_t{1} << 40)) ZT_THROW_INPUT(flag, " is ", text, ", more than 1T; give a smaller size");
  return bytes;
}

std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, int64_t factor) {
  std::vector<size_t> sizes;
  const auto f = static_cast<size_t>(factor);
  for (size_t s = min_bytes; s <= max_bytes; s *= f) {
    sizes.push_back(s);
    if (s > max_bytes / f) break;  // the next one is past max (and might overflow)
  }
  return sizes;
}

double busbw_factor(Collective op, int ranks) {
  const double n = ranks;
  return op == Collective::AllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

namespace {

using Clock = std::chrono::steady_clock;

// Inputs are small integers, so that every partial sum a reduction forms is exact in f32 and
// in bf16 (which holds the integers up to 256): |value| <= m with m * ranks <= 128 up to 128
// ranks. The value depends on the rank and the index, so a chunk that lands on the wrong
// rank or at the wrong offset is counted.
class Pattern {
 public:
  explicit Pattern(int ranks) : ranks_(ranks), magnitude_(std::clamp<int64_t>(128 / ranks, 1, 8)) {}

  float value(int rank, int64_t index) const {
    const int64_t span = 2 * magnitude_ + 1;
    return static_cast<float>(((index + 1) * (2 * rank + 3) + rank) % span - magnitude_);
  }
  float sum(int64_t index) const {
    float s = 0;
    for (int r = 0; r < ranks_; ++r) s += value(r, index);
    return s;
  }

 private:
  int ranks_;
  int64_t magnitude_;
};

// Host values into a buffer of any dtype on any device (staged through host memory).
void upload(const Tensor& dst, const std::vector<float>& values) {
  if (dst.device().is_cpu()) {
    convert(values.data(), DType::F32, dst.data(), dst.dtype(), values.size());
    return;
  }
  OwnedTensor staging(dst.shape(), dst.dtype());
  convert(values.data(), DType::F32, staging->data(), dst.dtype(), values.size());
  cuda::copy_to_device(dst.data(), staging->data(), dst.nbytes());
}

std::vector<float> download(const Tensor& src) {
  if (src.device().is_cpu()) return src.to_f32_vector();
  OwnedTensor staging(src.shape(), src.dtype());
  cuda::copy_to_host(staging->data(), src.data(), src.nbytes());
  return staging->to_f32_vector();
}

// One collective at one size: its buffers and how to start, fill and check it. all_reduce
// works in place (the communicator's only form), the others from input to output.
class Case {
 public:
  Case(Collective op, size_t target_bytes, DType dtype, Device device, int rank, int ranks)
      : op_(op), rank_(rank), ranks_(ranks) {
    const int64_t elements = static_cast<int64_t>(target_bytes / dtype_size(dtype));
    // At least one element per rank (nccl-tests would run an empty collective instead).
    if (op == Collective::AllReduce) {
      count_ = std::max<int64_t>(1, elements);
      input_ = OwnedTensor({count_}, dtype, device, "bench_buffer");
      return;
    }
    count_ = std::max<int64_t>(1, elements / ranks);
    OwnedTensor part({count_}, dtype, device, "bench_part"), whole({count_ * ranks}, dtype, device, "bench_whole");
    const bool scatter = op == Collective::ReduceScatter;
    input_ = std::move(scatter ? whole : part);
    output_ = std::move(scatter ? part : whole);
  }

  // nccl-tests' count column and size column (see bench_comm.h).
  int64_t count() const { return count_; }
  size_t bytes() const {
    const Tensor& per_rank = op_ == Collective::AllGather ? output_.view() : input_.view();
    return per_rank.nbytes();
  }

  comm::WorkPtr start(comm::Communicator& comm) const {
    switch (op_) {
      case Collective::AllReduce:
        return comm.all_reduce_async(input_, comm::ReduceOp::Sum);
      case Collective::ReduceScatter:
        return comm.reduce_scatter_async(input_, output_);
      case Collective::AllGather:
        return comm.all_gather_async(input_, output_);
    }
    ZT_CHECK(false, "unknown collective");
  }

  // Inputs get this rank's pattern; the output is zeroed, so that a collective that does not
  // write it shows as wrong elements.
  void fill(const Pattern& pattern) const {
    std::vector<float> values(static_cast<size_t>(input_->numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = pattern.value(rank_, static_cast<int64_t>(i));
    upload(input_, values);
    if (output_->defined() && output_->numel() > 0) output_->zero();
  }

  // Elements of this rank's result that differ from the exact result.
  int64_t count_wrong(const Pattern& pattern) const {
    std::vector<float> got = download(op_ == Collective::AllReduce ? input_.view() : output_.view());
    // Tests set ZT_TEST_BENCH_CORRUPT=1 to see one wrong element per size counted and failing
    // the run (a collective that works gives them no other way to).
    if (rank_ == ranks_ - 1 && simulated(Simulated::CorruptBenchResult)) got[0] += 1;
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto index = static_cast<int64_t>(i);
      float expected = 0;
      switch (op_) {
        case Collective::AllReduce:
          expected = pattern.sum(index);
          break;
        case Collective::ReduceScatter:
          expected = pattern.sum(rank_ * count_ + index);
          break;
        case Collective::AllGather:
          expected = pattern.value(static_cast<int>(index / count_), index % count_);
          break;
      }
      wrong += got[i] != expected;
    }
    return wrong;
  }

  bool in_place() const { return op_ == Collective::AllReduce; }

 private:
  Collective op_;
  int rank_;
  int ranks_;
  int64_t count_ = 0;
  OwnedTensor input_, output_;
};

// The communicators of one run: `host` for the bookkeeping (barriers, the max time, the
// wrong count) and `bench` for the measured collectives: the host one itself on CPU; on GPUs the
// device communicator over it (NCCL, or the staged one where ranks share a GPU).
struct Comms {
  std::unique_ptr<comm::Communicator> host;
  std::unique_ptr<comm::Communicator> device;
  comm::Communicator& bench() { return device ? *device : *host; }
};

Comms make_comms(const Device& device) {
  Comms comms;
  if (device.is_cuda() && !cuda::available()) {
    const bool built = cuda::versions().runtime_compiled != 0;
    ZT_THROW_UNSUPPORTED("--device cuda: ",
                         built ? "no GPU is visible to this process (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                               : "this zerotrain was built without the CUDA backend (rebuild with cmake --preset cuda)",
                         "; use --device cpu to measure the MPI collectives on host buffers");
  }
  comms.host = comm::make_world_communicator();
  if (device.is_cuda()) comms.device = comm::make_device_world_communicator(*comms.host);
  return comms;
}

// "cpu", or "cuda:0 NVIDIA H200" for the GPU this rank selected.
std::string describe_device(const Device& device) {
  if (device.is_cpu()) return "cpu";
  const int index = cuda::current_device();
  return str("cuda:", index, " ", cuda::device_info(index).name);
}

float max_over_ranks(comm::Communicator& host, float value) {
  OwnedTensor t({1}, DType::F32);
  t.data<float>()[0] = value;
  host.all_reduce(t, comm::ReduceOp::Max);
  return t.data<float>()[0];
}

int64_t sum_over_ranks(comm::Communicator& host, int64_t value) {
  OwnedTensor t({1}, DType::I64);
  t.data<int64_t>()[0] = value;
  host.all_reduce(t, comm::ReduceOp::Sum);
  return t.data<int64_t>()[0];
}

// Mean microseconds per collective on this rank: `iters` back to back after `warmup`. On
// the GPU they are queued without host waits (NCCL orders them on its stream) and the clock
// stops when the last is done; on the host each is waited for before the next (an MPI
// request must finish before its buffer is reused).
double time_us(const Case& c, Comms& comms, const CommBenchOptions& o) {
  const bool gpu = o.device.is_cuda();
  for (int64_t i = 0; i < o.warmup; ++i) c.start(comms.bench())->wait();
  if (gpu) cuda::synchronize();
  comms.host->barrier();
  const auto t0 = Clock::now();
  if (gpu) {
    std::vector<comm::WorkPtr> works;
    works.reserve(static_cast<size_t>(o.iters));
    for (int64_t i = 0; i < o.iters; ++i) works.push_back(c.start(comms.bench()));
    for (auto& w : works) w->wait();
    cuda::synchronize();
  } else {
    for (int64_t i = 0; i < o.iters; ++i) c.start(comms.bench())->wait();
  }
  const std::chrono::duration<double, std::micro> elapsed = Clock::now() - t0;
  return elapsed.count() / static_cast<double>(o.iters);
}

CommBenchRow measure(Collective op, size_t target_bytes, Comms& comms, const CommBenchOptions& o) {
  comm::Communicator& bench = comms.bench();
  const int rank = bench.rank(), ranks = bench.size();
  const Pattern pattern(ranks);
  const Case c(op, target_bytes, o.dtype, o.device, rank, ranks);
  c.fill(pattern);

  CommBenchRow row;
  row.op = op;
  row.bytes = c.bytes();
  row.count = c.count();
  row.time_us = max_over_ranks(*comms.host, static_cast<float>(time_us(c, comms, o)));
  row.algbw_gbs = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0.0;
  row.busbw_gbs = row.algbw_gbs * busbw_factor(op, ranks);
  if (o.check) {
    // In place, the timed loop summed sums: start again from the pattern for one checked run.
    if (c.in_place()) {
      c.fill(pattern);
      c.start(bench)->wait();
    }
    row.wrong = sum_over_ranks(*comms.host, c.count_wrong(pattern));
  }
  return row;
}

}  // namespace

int run_comm_bench(const CommBenchOptions& o) {
  Comms comms = make_comms(o.device);
  comm::Communicator& bench = comms.bench();
  const bool printer = comms.host->rank() == 0;
  const CommBenchSetup setup{bench.size(), bench.backend_name(), describe_device(o.device)};
  if (printer) print_comm_header(o, setup);
  // Every rank keeps the rows (their numbers are agreed over the ranks), so that every rank
  // returns the same exit code.
  std::vector<CommBenchRow> rows;
  for (const Collective op : o.ops) {
    for (const size_t bytes : sweep_sizes(o.min_bytes, o.max_bytes, o.factor)) {
      rows.push_back(measure(op, bytes, comms, o));
      if (printer) print_comm_row(rows.back(), o.dtype);
    }
  }
  if (printer) {
    print_comm_summary(rows, o);
    if (!o.json_path.empty()) write_comm_json(o.json_path, o, setup, rows);
  }
  const bool any_wrong =
      std::any_of(rows.begin(), rows.end(), [](const CommBenchRow& r) { return r.wrong.value_or(0) > 0; });
  return any_wrong ? 1 : 0;
}

}  // namespace zt::cli
