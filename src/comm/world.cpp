#include "comm/world.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda_api.h"
#include "core/env_vars.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor.h"
#include "comm/env.h"
#include "comm/single.h"
#include "comm/staged_device_communicator.h"

#if ZT_WITH_MPI
#include "comm/mpi_communicator.h"
#endif
#if ZT_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace zt::comm {

std::unique_ptr<Communicator> make_world_communicator() {
  const LaunchEnv env = read_launch_env();
  if (env.world_size == 1) return std::make_unique<SingleCommunicator>();
#if ZT_WITH_MPI
  auto comm = MpiCommunicator::world();
  if (comm->size() != env.world_size) {
    ZT_THROW_INPUT("the launcher says ", env.world_size, " ranks (", env.source, " variables) but MPI has ",
                   comm->size(), "; start the processes with mpirun or srun, not ", env.source, " alone");
  }
  return comm;
#else
  ZT_THROW_UNSUPPORTED("this process is rank ", env.rank, " of ", env.world_size, " (", env.source,
                       " variables) but zerotrain was built without MPI; "
                       "install libopenmpi-dev and rebuild");
#endif
}

namespace {

// This rank's GPU: its local rank modulo the visible GPUs (0 when the process sees a single
// GPU, as with one CUDA_VISIBLE_DEVICES entry per rank; ranks beyond the GPU count share
// them, which the device communicator's choice then sees).
int select_gpu(const LaunchEnv& env) {
  const int count = cuda::device_count();
  if (count == 0) {
    ZT_THROW_UNSUPPORTED("rank ", env.rank,
                         ": the device communicator needs a GPU but none is "
                         "visible (check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  return env.local_rank % count;
}

#if !ZT_WITH_NCCL
[[noreturn]] void throw_no_nccl() {
  ZT_THROW_UNSUPPORTED(
      "zerotrain was built without NCCL, which collectives on GPU buffers "
      "need; install NCCL (nccl.h and libnccl.so: the CUDA toolkit's, or "
      "apt-get install libnccl-dev) and rebuild with the CUDA backend "
      "(cmake --preset cuda)");
}
#endif

}  // namespace

std::unique_ptr<Communicator> make_nccl_world_communicator() {
#if ZT_WITH_NCCL
  const LaunchEnv env = read_launch_env();
  if (env.world_size == 1) {
    SingleCommunicator single;
    return make_nccl_world_communicator(single);
  }
  // The MPI world, checked against the launcher; needed only to pass the NCCL unique id.
  auto world = make_world_communicator();
  return make_nccl_world_communicator(*world);
#else
  throw_no_nccl();
#endif
}

std::unique_ptr<Communicator> make_nccl_world_communicator(Communicator& bootstrap) {
#if ZT_WITH_NCCL
  // A GPU chosen already (zt::cuda::init by the caller) is kept.
  if (!cuda::initialized()) cuda::init(select_gpu(read_launch_env()));
  return NcclCommunicator::create(bootstrap);
#else
  (void)bootstrap;
  throw_no_nccl();
#endif
}

DeviceCommChoice device_comm_choice(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return DeviceCommChoice::Auto;
  if (std::strcmp(value, "nccl") == 0) return DeviceCommChoice::Nccl;
  if (std::strcmp(value, "staged") == 0) return DeviceCommChoice::Staged;
  ZT_THROW_INPUT(env_name(EnvVar::DeviceComm), "='", value,
                 "' is not a device communicator: use auto (the default: NCCL unless ranks share a GPU), nccl or "
                 "staged (through host memory over MPI, for several ranks on one GPU)");
}

DeviceCommChoice device_comm_choice_from_env() { return device_comm_choice(env_value(EnvVar::DeviceComm)); }

DeviceSharing device_sharing(const std::vector<std::string>& device_ids) {
  DeviceSharing s;
  const int n = static_cast<int>(device_ids.size());
  if (n > 0)
    s.ranks_on_rank0_device = static_cast<int>(std::count(device_ids.begin(), device_ids.end(), device_ids[0]));
  for (int a = 0; a < n && !s.any_shared; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (device_ids[a] == device_ids[b]) {
        s.any_shared = true;
        s.first = a;
        s.second = b;
        break;
      }
    }
  }
  return s;
}

namespace {

// Every rank's GPU UUID over the host communicator, in rank order (fixed-size words).
std::vector<std::string> gather_device_ids(Communicator& host, const std::string& mine) {
  constexpr int64_t kBytes = 64;
  ZT_CHECK(static_cast<int64_t>(mine.size()) < kBytes, "device id '", mine, "' is longer than ", kBytes - 1, " bytes");
  OwnedTensor all({host.size() * kBytes / 4}, DType::I32, Device::cpu(), "device ids");
  const Tensor slot = all->narrow(0, host.rank() * kBytes / 4, kBytes / 4);
  std::memset(slot.data(), 0, kBytes);
  std::memcpy(slot.data(), mine.data(), mine.size());
  if (host.size() > 1) host.all_gather(slot, all);
  std::vector<std::string> ids;
  for (int r = 0; r < host.size(); ++r) ids.emplace_back(static_cast<const char*>(all->data()) + r * kBytes);
  return ids;
}

}  // namespace

std::unique_ptr<Communicator> make_device_world_communicator(Communicator& host_world) {
  const DeviceCommChoice choice = device_comm_choice_from_env();
  if (!cuda::initialized()) cuda::init(select_gpu(read_launch_env()));
  const int device = cuda::current_device();
  const DeviceSharing sharing = device_sharing(gather_device_ids(host_world, cuda::device_info(device).uuid));
#if ZT_WITH_NCCL
  constexpr bool kHaveNccl = true;
#else
  constexpr bool kHaveNccl = false;
#endif
  const bool staged =
      choice == DeviceCommChoice::Staged || (choice == DeviceCommChoice::Auto && (sharing.any_shared || !kHaveNccl));
  if (choice == DeviceCommChoice::Nccl && sharing.any_shared) {
    ZT_THROW_INPUT(env_name(EnvVar::DeviceComm), "=nccl, but ranks ", sharing.first, " and ", sharing.second,
                   " share one GPU, and NCCL needs a GPU per rank: give each rank its own GPU "
                   "(CUDA_VISIBLE_DEVICES, fewer ranks), or unset ",
                   env_name(EnvVar::DeviceComm), " to stage through host memory");
  }
  if (!staged) return make_nccl_world_communicator(host_world);
  auto comm = StagedDeviceCommunicator::create(host_world, cuda_staging());
  if (host_world.rank() == 0) {
    std::string why;
    if (choice == DeviceCommChoice::Staged) {
      why = str(env_name(EnvVar::DeviceComm), "=staged");
    } else if (sharing.ranks_on_rank0_device > 1) {
      why = str(sharing.ranks_on_rank0_device, " ranks share cuda:", device);
    } else if (sharing.any_shared) {
      why = str("ranks ", sharing.first, " and ", sharing.second, " share a GPU");
    } else {
      why = "this build has no NCCL";
    }
    ZT_INFO("device communicator: staged through ", comm->staging().describe(), " over ",
            host_world.backend_name() == "mpi" ? std::string("MPI") : host_world.backend_name(), " (", why,
            "; for testing and debugging, slower than NCCL)");
  }
  return comm;
}

}  // namespace zt::comm
