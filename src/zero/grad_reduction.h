// The gradient-reduction strategy: how the ZeRO engine turns each rank's local gradients of
// a unit into the group's sum at a reduction point (after the unit's backward, in the
// micro-batches zero/engine.h says). The engine asks the strategy to start a unit's
// reduction and, once its collectives completed, to finish it; where the result goes (the
// full buffer, the owned slice, the f32 partition) stays the engine's business.
//
//   sum (plain)  the gradients' own dtype on the wire: all_reduce in buckets (stage 0), or a
//                reduce-scatter of every rank's slice (stages 1-3).
//   sum (cast)   DeepSpeed's communication_data_type: each bucket converted to the wire
//                dtype before its collective (rounded once), converted back by finish
//                (stage 0) or left in the wire dtype for the engine to add (stages 1-3).
//   optimizer-owned  no collective of the engine's: an optimizer that exchanges gradients
//                itself (1-bit Adam: compressed momentum with error feedback) receives
//                each unit's unreduced local gradients and its group.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace zt::zero {

// One unit's reduction, as the engine asks for it.
struct ReductionRequest {
  size_t unit = 0;                     // the registry index
  Tensor grads;                        // the unit's full local gradient buffer (flat, padded)
  comm::Communicator* comm = nullptr;  // the unit's group (its buffer communicator)
  int stage = 0;
  int64_t slice = 0;        // P = grads.numel() / comm->size(): this rank owns [rank*P, (rank+1)*P)
  int64_t bucket_size = 0;  // reduce_bucket_size: elements per collective
};

enum class Collective { None, AllReduce, ReduceScatter };

// A started reduction: its collectives in flight and the buffers they use (which must
// stay alive until they complete).
struct ReductionWork {
  std::vector<comm::WorkPtr> works;
  std::vector<OwnedTensor> packed;    // bucket inputs packed from strided slices, or converted
  std::vector<int64_t> unpack_begin;  // stage 0 in another dtype: where each packed bucket goes back
  // Stages 1-3: [P] this rank's slice of the group's sum (in the wire dtype); empty when
  // the strategy left no sum for the engine (optimizer-owned).
  OwnedTensor output;
  Collective collective = Collective::None;  // what CommVolume counts
  double wire_bytes = 0;                     // the unit's gradient bytes in the wire dtype
};

class GradReduction {
 public:
  virtual ~GradReduction() = default;
  // For errors and logs: "sum", "sum in bf16", "optimizer-owned".
  virtual std::string name() const = 0;
  // BadInput when the strategy cannot run with this ZeRO stage.
  virtual void check_stage(int stage) const { (void)stage; }
  // Starts the reduction. Stage 0: the group's sum is in req.grads once finish() returns;
  // stages 1-3: in work.output.
  virtual ReductionWork start(const ReductionRequest& req) = 0;
  // After every collective of `work` completed.
  virtual void finish(const ReductionRequest& req, ReductionWork& work) = 0;
};

// The sum over the unit's group; with wire_dtype (communication_data_type) converted to it
// for the collectives when it differs from the gradients' (a group of one rank moves
// nothing, so it never converts). DeepSpeed's reduction, and today's.
std::unique_ptr<GradReduction> make_sum_reduction(std::optional<DType> wire_dtype = std::nullopt);

// An optimizer that exchanges its gradients itself.
class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // The reduction point of `unit` in the accumulation's last micro-batch: its local
  // gradients (this rank's micro-batches summed, not reduced) and the unit's group. Every
  // rank of the group reaches its units in the same order, so the exchange may be
  // collective over `group`; it may also rewrite `local_grads` (e.g. with the group's
  // decompressed sum). The buffer stays the engine's: it is zeroed by the next zero_grads.
  virtual void exchange(size_t unit, const Tensor& local_grads, comm::Communicator& group) = 0;
};

// The engine reduces nothing: each unit's gradients go to `owner` (which must outlive the
// strategy). Stages 0-1 only: stages 2-3 free a unit's full gradients right after its
// reduction, so the optimizer would have nothing to read.
std::unique_ptr<GradReduction> make_optimizer_owned_reduction(GradientExchange& owner);

}  // namespace zt::zero
