// Communicator over MPI for host buffers. MPI starts with the first communicator (an MPI
// singleton of world size 1 when run without mpirun) and ends at process exit.
// Each communicator owns its own MPI communicator (a dup or split), so its messages never
// match another's. Waits poll with a deadline (see communicator.h); MPI errors are
// returned, not fatal, and become zt::Error.
//
// Threads: with MPI_THREAD_MULTIPLE (thread_multiple()) any thread may call; otherwise
// every call must come from one thread.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace zt::comm {

class MpiCommunicator final : public Communicator {
 public:
  // All ranks of MPI_COMM_WORLD; collective over them. The timeout defaults to
  // ZT_COLLECTIVE_TIMEOUT_S (else 300 s).
  static std::unique_ptr<MpiCommunicator> world();
  static std::unique_ptr<MpiCommunicator> world(Seconds timeout);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Seconds timeout() const override;
  std::string backend_name() const override { return "mpi"; }
  static bool thread_multiple();

  WorkPtr all_reduce_async(const Tensor& buffer, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  WorkPtr all_gather_async(const Tensor& input, const Tensor& output) override;
  WorkPtr broadcast_async(const Tensor& buffer, int root) override;
  // MPI_Ialltoallv: counts and displacements are MPI ints, so any of them above 2^31-1
  // elements is an Unsupported error (split the exchange).
  WorkPtr all_to_all_v_async(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) override;
  WorkPtr send_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr recv_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr barrier_async() override;
  // The sub-group inherits this communicator's timeout.
  std::unique_ptr<Communicator> split(int color, int key) override;

  struct Impl;  // holds the MPI_Comm; defined in mpi_communicator.cpp (no <mpi.h> here)

 private:
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::comm
