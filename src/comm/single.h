// The world-size-1 communicator: no MPI, no launcher. Every collective keeps the semantics
// it has for N ranks with N = 1 (all_reduce and broadcast leave the buffer as it is;
// reduce_scatter, all_gather and all_to_all_v copy input to output), so the single-process trainer runs
// the same code path as a distributed one. send/recv to rank 0 itself go through a
// mailbox (copies), as MPI allows a rank to message itself.
#pragma once
#include <deque>
#include <map>
#include <vector>

#include "comm/communicator.h"

namespace zt::comm {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Seconds timeout() const override { return Seconds(0); }
  std::string backend_name() const override { return "single"; }

  WorkPtr all_reduce_async(const Tensor& buffer, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  WorkPtr all_gather_async(const Tensor& input, const Tensor& output) override;
  WorkPtr broadcast_async(const Tensor& buffer, int root) override;
  WorkPtr all_to_all_v_async(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) override;
  WorkPtr send_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr recv_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr barrier_async() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  // Messages sent to self and not yet received, by tag, oldest first (MPI's order).
  std::map<int, std::deque<std::vector<char>>> mailbox_;
};

}  // namespace zt::comm
