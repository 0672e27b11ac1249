// StagedDeviceCommunicator on device buffers (the CPU logic is in
// tests/comm/staged_device_communicator_test.cpp):
//   - StagedDevice.*: one rank (plain ctest), staged over the single-process communicator
//     with the CUDA copy stream and pinned blocks: every collective keeps its meaning, the
//     copy out follows the compute stream's earlier kernels and the compute stream's later
//     work sees the result;
//   - StagedSharedGpu.*: meant for `mpirun -np 2` (or 4) of this binary on a machine with one
//     GPU, every rank on cuda:0 (skipped otherwise):
//       mpirun -np 2 build/cuda/zt_cuda_tests --gtest_filter='StagedSharedGpu.*'
//     the device world communicator is the staged one, its collectives equal MPI's on the
//     same data bit for bit, and ZeRO stages 1, 2 and 3 in bf16 (f32 master weights), with
//     and without optimizer offload, follow the one-rank run's losses over 20 steps (the
//     one-rank run: the same micro-batches as gradient accumulation): f32 within 1e-5
//     relative, bf16 within 1e-4 (its one-rank run adds each micro-batch's gradient into
//     the bf16 gradient in one rounding, the ranks round theirs to bf16 before summing:
//     2.1e-5 and 2.6e-5 measured on 2 and 4 CPU ranks).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "common/scoped_env.h"
#include "comm/env.h"
#include "comm/single.h"
#include "comm/staged_device_communicator.h"
#include "comm/world.h"
#include "config/run_config.h"
#include "core/error.h"
#include "core/tensor.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace zt;
using zt::testing::to_device;
using zt::testing::to_host;

namespace {

OwnedTensor filled(DType dt, int64_t n, int r) {
  OwnedTensor t({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.5f * static_cast<float>((r + 1) * (i % 7 + 1)) + 0.03125f * static_cast<float>(i % 5);
    t->set_f32(i, ((r + i) % 3 == 0) ? -v : v);
  }
  return t;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what;
}

std::unique_ptr<comm::StagedDeviceCommunicator> staged_single(comm::SingleCommunicator& single) {
  return comm::StagedDeviceCommunicator::create(single, comm::cuda_staging());
}

TEST(StagedDevice, EveryCollectiveOnOneRank) {
  ZT_REQUIRE_GPU();
  comm::SingleCommunicator single;
  auto c = staged_single(single);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->backend_name(), "staged(single)");
  EXPECT_GT(c->timeout().count(), 0.0);

  OwnedTensor h = filled(DType::BF16, 1000, 0);
  OwnedTensor d = to_device(h);
  c->all_reduce(d, comm::ReduceOp::Sum);
  expect_same_bytes(to_host(d), h, "all_reduce");

  OwnedTensor rs_out({1000}, DType::BF16, Device::cuda());
  c->reduce_scatter(d, rs_out);
  expect_same_bytes(to_host(rs_out), h, "reduce_scatter");

  OwnedTensor ag_out({1000}, DType::BF16, Device::cuda());
  c->all_gather(d, ag_out);
  expect_same_bytes(to_host(ag_out), h, "all_gather");
  c->all_gather(ag_out->narrow(0, 0, 1000), ag_out);  // in place
  expect_same_bytes(to_host(ag_out), h, "all_gather in place");

  c->broadcast(d, 0);
  expect_same_bytes(to_host(d), h, "broadcast");

  OwnedTensor a2a_out({1000}, DType::BF16, Device::cuda());
  c->all_to_all_v(d, a2a_out, {1000}, {1000});
  expect_same_bytes(to_host(a2a_out), h, "all_to_all_v");

  OwnedTensor got({1000}, DType::BF16, Device::cuda());
  auto send = c->send_async(d, 0, 3);
  auto recv = c->recv_async(got, 0, 3);
  send->wait();
  recv->wait();
  expect_same_bytes(to_host(got), h, "send/recv to itself");
  c->barrier();

  OwnedTensor host_buffer({4}, DType::F32);
  EXPECT_THROW(c->all_reduce(host_buffer, comm::ReduceOp::Sum), Error);
}

TEST(StagedDevice, CopiesFollowTheComputeStreamBothWays) {
  ZT_REQUIRE_GPU();
  comm::SingleCommunicator single;
  auto c = staged_single(single);
  // 16M elements: the conversion kernel runs long enough that a copy not ordered after it
  // would read the old values.
  const int64_t n = int64_t{16} << 20;
  OwnedTensor src_host({n}, DType::F32);
  src_host->fill_f32(3.0f);
  OwnedTensor src = to_device(src_host);
  OwnedTensor input({n}, DType::BF16, Device::cuda());
  OwnedTensor output({n}, DType::BF16, Device::cuda());
  cuda::synchronize();
  // Queued on the compute stream, then the gather at once (no host wait between).
  cuda::convert_on_device(src->data(), DType::F32, input->data(), DType::BF16, static_cast<size_t>(n));
  auto work = c->all_gather_async(input, output);
  work->wait();
  OwnedTensor back = to_host(output);  // a copy on the compute stream
  EXPECT_EQ(back->get_f32(0), 3.0f);
  EXPECT_EQ(back->get_f32(n - 1), 3.0f);
}

TEST(StagedDevice, ManyOperationsInFlightWaitedInReverse) {
  ZT_REQUIRE_GPU();
  comm::SingleCommunicator single;
  auto c = staged_single(single);
  std::vector<OwnedTensor> hosts, ins, outs;
  std::vector<comm::WorkPtr> works;
  for (int k = 0; k < 16; ++k) {
    hosts.push_back(filled(DType::F32, 4096 * (k + 1), k));
    ins.push_back(to_device(hosts.back()));
    outs.emplace_back(Shape{4096 * (k + 1)}, DType::F32, Device::cuda());
  }
  for (int k = 0; k < 16; ++k) works.push_back(c->all_gather_async(ins[k], outs[k]));
  for (int k = 15; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 16; ++k) expect_same_bytes(to_host(outs[k]), hosts[k], str("operation ", k));
}

TEST(StagedDevice, DeviceWorldCommunicatorOnOneRankBySetting) {
  ZT_REQUIRE_GPU();
  zt::testing::ScopedEnv env("ZT_DEVICE_COMM", "staged");
  comm::SingleCommunicator single;
  auto c = comm::make_device_world_communicator(single);
  EXPECT_EQ(c->backend_name(), "staged(single)");
  OwnedTensor d = to_device(filled(DType::F32, 10, 0));
  c->all_reduce(d, comm::ReduceOp::Max);
  expect_same_bytes(to_host(d), filled(DType::F32, 10, 0), "all_reduce");
  EXPECT_FALSE(cuda::device_info(cuda::current_device()).uuid.empty());
}

// ---- several ranks on the one GPU (mpirun) --------------------------------------------

comm::Communicator& host_world() {
  static std::unique_ptr<comm::Communicator> w = comm::make_world_communicator();
  return *w;
}

#define ZT_REQUIRE_SHARED_GPU()                                                              \
  do {                                                                                       \
    if (!::zt::cuda::available()) GTEST_SKIP() << "no GPU visible";                          \
    if (host_world().size() < 2)                                                             \
      GTEST_SKIP() << "needs several ranks on the GPU: mpirun -np 2 zt_cuda_tests "          \
                      "--gtest_filter='StagedSharedGpu.*'";                                  \
    ::zt::cuda::init(::zt::comm::read_launch_env().local_rank % ::zt::cuda::device_count()); \
  } while (0)

TEST(StagedSharedGpu, CollectivesEqualMpiOnTheSameData) {
  ZT_REQUIRE_SHARED_GPU();
  comm::Communicator& w = host_world();
  if (cuda::device_count() > 1) GTEST_SKIP() << "several GPUs visible: the ranks may not share one";
  auto dc = comm::make_device_world_communicator(w);
  EXPECT_EQ(dc->backend_name(), "staged(mpi)");
  const int n = w.size(), me = w.rank();
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    OwnedTensor h = filled(dt, 3001, me);
    OwnedTensor d = to_device(h);
    dc->all_reduce(d, comm::ReduceOp::Sum);
    w.all_reduce(h, comm::ReduceOp::Sum);
    expect_same_bytes(to_host(d), h, str("all_reduce ", dtype_name(dt)));

    OwnedTensor rs_h = filled(dt, 128 * n, me), rs_ref({128}, dt);
    OwnedTensor rs_out({128}, dt, Device::cuda());
    dc->reduce_scatter(to_device(rs_h), rs_out);
    w.reduce_scatter(rs_h, rs_ref);
    expect_same_bytes(to_host(rs_out), rs_ref, str("reduce_scatter ", dtype_name(dt)));
  }
  OwnedTensor full({100 * n}, DType::BF16, Device::cuda());
  dc->all_gather(to_device(filled(DType::BF16, 100, me)), full);
  OwnedTensor gathered = to_host(full);
  for (int r = 0; r < n; ++r)
    expect_same_bytes(gathered->narrow(0, r * 100, 100), filled(DType::BF16, 100, r), str("all_gather rank ", r));

  // all_to_all_v with uneven counts (zeros included) against the local reference.
  std::vector<int64_t> sc, rc;
  int64_t n_in = 0, n_out = 0;
  for (int p = 0; p < n; ++p) {
    sc.push_back((3 * me + 5 * p + 1) % 4);
    rc.push_back((3 * p + 5 * me + 1) % 4);
    n_in += sc.back();
    n_out += rc.back();
  }
  OwnedTensor in_h({n_in}, DType::F32);
  int64_t i = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t j = 0; j < sc[p]; ++j) in_h->set_f32(i++, static_cast<float>(64 * me + 16 * p + j));
  OwnedTensor out_d({n_out}, DType::F32, Device::cuda());
  dc->all_to_all_v(to_device(in_h), out_d, sc, rc);
  OwnedTensor out_h = to_host(out_d);
  int64_t o = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t j = 0; j < rc[p]; ++j, ++o)
      EXPECT_EQ(out_h->get_f32(o), static_cast<float>(64 * p + 16 * me + j)) << "from rank " << p;

  auto group = dc->split(me % 2, me);
  OwnedTensor g = to_device(filled(DType::F32, 8, me));
  group->all_reduce(g, comm::ReduceOp::Max);
  EXPECT_EQ(group->backend_name(), "staged(mpi)");
}

// The launchers' rank variables, removed for a scope: run_training then sees one process
// (the single-process communicator) while MPI stays up for the job's other tests.
class AloneInTheJob {
 public:
  AloneInTheJob() {
    for (const char* name :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
          "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
          "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}) {
      if (const char* v = std::getenv(name)) {
        saved_[name] = v;
        ::unsetenv(name);
      }
    }
  }
  ~AloneInTheJob() {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  AloneInTheJob(const AloneInTheJob&) = delete;
  AloneInTheJob& operator=(const AloneInTheJob&) = delete;

 private:
  std::map<std::string, std::string> saved_;
};

// 20 steps of tiny-gpt2 on the GPU (bf16: f32 master weights and optimizer state), 2 windows
// of 64 tokens per micro-batch; `ranks` the job's size, `accumulation` its
// gradient_accumulation_steps. ~320 windows: 20 steps of 4 ranks stay in the first epoch
// (past its end the one-rank run drops its partial batch per micro-batch, the ranks per step).
std::vector<double> train_losses(const fs::path& out, bool bf16, int ranks, int accumulation,
                                 const std::vector<std::string>& extra) {
  const fs::path yaml = out.string() + ".yaml";
  if (host_world().rank() == 0 || ranks == 1) {
    std::ofstream(yaml) << "model: {preset: tiny-gpt2}\n"
                        << "data:\n  train: ['" << ZT_SOURCE_DIR << "/data/text/artistic.txt', '" << ZT_SOURCE_DIR
                        << "/data/text/apache-2.0.txt', '" << ZT_SOURCE_DIR
                        << "/data/text/gpl-3.txt']\n  seq_len: 64\n"
                           "per_device_train_batch_size: 2\ngradient_accumulation_steps: "
                        << accumulation
                        << "\nlearning_rate: 1.0e-3\nmax_steps: 20\nsave_interval: 0\neval_interval: 0\n"
                           "steps_per_print: 5\nseed: 7\nsamples: {tokens: 0}\ndevice: cuda\n"
                           "output_dir: '"
                        << out.string() << "'\n";
  }
  if (ranks > 1) host_world().barrier();
  config::LoadOptions lo;
  lo.world_size = ranks;
  std::vector<std::string> args{yaml.string(), "--overwrite_output_dir"};
  if (bf16) args.insert(args.end(), {"--bf16", "true"});
  args.insert(args.end(), extra.begin(), extra.end());
  return train::run_training(config::load_train_config(args, lo)).losses;
}

// The one-rank run's 20 losses on every rank: rank 0 trains alone, the n ranks'
// micro-batches as n accumulation steps (the loader gives micro-batch m of a step the
// windows rank m gets in the n-rank job), and broadcasts them as f32 high and low parts.
std::vector<double> one_rank_losses(const fs::path& dir, bool bf16) {
  comm::Communicator& w = host_world();
  std::vector<double> reference(20, 0.0);
  if (w.rank() == 0) {
    AloneInTheJob alone;
    reference = train_losses(dir / (bf16 ? "one_rank_bf16" : "one_rank_f32"), bf16, 1, w.size(), {});
    EXPECT_EQ(reference.size(), 20u);
    reference.resize(20, 0.0);
  }
  OwnedTensor parts({40}, DType::F32);
  for (int s = 0; s < 20; ++s) {
    const float h = static_cast<float>(reference[s]);
    parts.data<float>()[2 * s] = h;
    parts.data<float>()[2 * s + 1] = static_cast<float>(reference[s] - static_cast<double>(h));
  }
  w.broadcast_async(parts, 0)->wait(comm::Seconds(600.0));  // the others wait while rank 0 trains
  for (int s = 0; s < 20; ++s)
    reference[s] =
        static_cast<double>(parts.data<float>()[2 * s]) + static_cast<double>(parts.data<float>()[2 * s + 1]);
  return reference;
}

TEST(StagedSharedGpu, ZeroStagesFollowTheOneRankRun) {
  ZT_REQUIRE_SHARED_GPU();
  comm::Communicator& w = host_world();
  const int n = w.size();
  // One scratch directory for the job: rank 0's pid.
  const double pid = comm::sum_over_ranks(w, w.rank() == 0 ? static_cast<double>(::getpid()) : 0.0);
  const fs::path dir = fs::path(ZT_BINARY_DIR) / "test_tmp" / str("staged_zero_", static_cast<long long>(pid));
  if (w.rank() == 0) fs::create_directories(dir);
  w.barrier();

  struct Case {
    bool bf16;
    int stage;
    bool offload;
  };
  const std::vector<Case> cases = {{true, 1, false},  {true, 2, false}, {true, 3, false},
                                   {true, 1, true},   {true, 2, true},  {true, 3, true},
                                   {false, 1, false}, {false, 2, true}, {false, 3, false}};
  std::map<bool, std::vector<double>> reference;
  for (const Case& k : cases) {
    if (!reference.count(k.bf16)) reference[k.bf16] = one_rank_losses(dir, k.bf16);
    const std::vector<double>& ref = reference[k.bf16];
    std::vector<std::string> extra{"--zero_optimization.stage", std::to_string(k.stage)};
    if (k.offload) extra.insert(extra.end(), {"--zero_optimization.offload_optimizer.device", "cpu"});
    const std::string label =
        str(k.bf16 ? "bf16" : "f32", " stage ", k.stage, k.offload ? " offload" : "", " on ", n, " ranks");
    const std::vector<double> losses = train_losses(
        dir / str(k.bf16 ? "bf16" : "f32", "_s", k.stage, k.offload ? "_offload" : ""), k.bf16, n, 1, extra);
    ASSERT_EQ(losses.size(), 20u) << label;
    double worst = 0;
    for (int s = 0; s < 20; ++s) worst = std::max(worst, std::fabs(losses[s] - ref[s]) / std::fabs(ref[s]));
    if (w.rank() == 0)
      std::printf("[staged-zero] %s: max rel loss diff %.3e over 20 steps (first %.6f / %.6f, last %.6f / %.6f)\n",
                  label.c_str(), worst, losses.front(), ref.front(), losses.back(), ref.back());
    EXPECT_LE(worst, k.bf16 ? 1e-4 : 1e-5) << label;
  }
  w.barrier();
  if (w.rank() == 0) fs::remove_all(dir);
}

}  // namespace
