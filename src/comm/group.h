// A group of ranks: its host communicator and, on GPU runs, its device communicator. The
// mesh (comm/mesh.h) makes one per axis; the parallel layer (parallel/linear.h) and the
// ZeRO engine take them as arguments. Passed, never global.
#pragma once
#include "comm/communicator.h"
#include "core/device.h"

namespace zt::comm {

// A group's communicators (owned elsewhere: by a Mesh, or the caller). host: MPI or the
// single-process communicator (host buffers, scalars, barriers); device: the communicator
// of the model's device buffers (NCCL, or the staged one), null without one.
class Group {
 public:
  Group() = default;
  // device, if given, must have host's rank and size.
  explicit Group(Communicator& host, Communicator* device = nullptr);
  Communicator& host() const { return *host_; }
  Communicator* device() const { return device_; }
  // Where the model's buffers move: the device communicator when there is one.
  Communicator& buffers() const { return device_ ? *device_ : *host_; }
  // An empty group (default-constructed) stands for one rank: rank 0 of 1.
  int rank() const { return host_ ? host_->rank() : 0; }
  int size() const { return host_ ? host_->size() : 1; }
  bool valid() const { return host_ != nullptr; }
  // The communicator that takes tensors on `device`: the host one for host memory, the
  // device one for a GPU's (null when the group has none, or is empty).
  Communicator* for_tensors_on(const Device& device) const { return device.is_cpu() ? host_ : device_; }

 private:
  Communicator* host_ = nullptr;
  Communicator* device_ = nullptr;
};

}  // namespace zt::comm
