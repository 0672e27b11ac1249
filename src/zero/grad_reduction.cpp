#include "zero/grad_reduction.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "ops/copy.h"

namespace zt::zero {

namespace {

class SumReduction final : public GradReduction {
 public:
  explicit SumReduction(std::optional<DType> wire) : wire_(wire) {}

  std::string name() const override { return wire_ ? str("sum in ", dtype_name(*wire_)) : "sum"; }

  ReductionWork start(const ReductionRequest& req) override {
    const Tensor& flat = req.grads;
    comm::Communicator& comm = *req.comm;
    const int W = comm.size();
    // One rank moves nothing: rounding its gradients would only lose precision.
    const DType cd = W == 1 ? flat.dtype() : wire_.value_or(flat.dtype());
    const bool convert = cd != flat.dtype();
    ReductionWork r;
    r.wire_bytes = static_cast<double>(flat.numel()) * static_cast<double>(dtype_size(cd));
    if (req.stage == 0) {
      // Buckets of at most bucket_size elements, summed in place (or through a converted copy).
      r.collective = Collective::AllReduce;
      const int64_t n = flat.numel(), bucket = req.bucket_size;
      for (int64_t b = 0; b < n; b += bucket) {
        const Tensor piece = flat.narrow(0, b, std::min(bucket, n - b));
        if (!convert) {
          r.works.push_back(comm.all_reduce_async(piece, comm::ReduceOp::Sum));
          continue;
        }
        OwnedTensor packed({piece.numel()}, cd, flat.device());
        ops::copy(packed, piece);
        r.works.push_back(comm.all_reduce_async(packed, comm::ReduceOp::Sum));
        r.packed.push_back(std::move(packed));
        r.unpack_begin.push_back(b);
      }
      return r;
    }
    // A real reduce-scatter: rank r receives the sum of every rank's slice r. A bucket of
    // width w covers [j*w, (j+1)*w) of every slice; when the slice needs several buckets
    // (or another dtype) the strided pieces are packed into one contiguous input first.
    r.collective = Collective::ReduceScatter;
    const int64_t P = req.slice;
    const int64_t width = std::max<int64_t>(1, req.bucket_size / W);
    r.output = OwnedTensor({P}, cd, flat.device());
    if (width >= P && !convert) {
      r.works.push_back(comm.reduce_scatter_async(flat, r.output));
      return r;
    }
    for (int64_t b = 0; b < P; b += width) {
      const int64_t w = std::min(width, P - b);
      OwnedTensor packed({w * W}, cd, flat.device());
      for (int q = 0; q < W; ++q) ops::copy(packed->narrow(0, q * w, w), flat.narrow(0, q * P + b, w));
      r.works.push_back(comm.reduce_scatter_async(packed, r.output->narrow(0, b, w)));
      r.packed.push_back(std::move(packed));
    }
    return r;
  }

  void finish(const ReductionRequest& req, ReductionWork& r) override {
    // Stage 0's converted buckets go back into the full gradient buffer (rounded to its dtype).
    for (size_t k = 0; k < r.unpack_begin.size(); ++k)
      ops::copy(req.grads.narrow(0, r.unpack_begin[k], r.packed[k]->numel()), r.packed[k]);
  }

 private:
  std::optional<DType> wire_;
};

class OptimizerOwnedReduction final : public GradReduction {
 public:
  explicit OptimizerOwnedReduction(GradientExchange& owner) : owner_(owner) {}

  std::string name() const override { return "optimizer-owned"; }

  void check_stage(int stage) const override {
    if (stage >= 2)
      ZT_THROW_INPUT("an optimizer that exchanges its own gradients runs with ZeRO stage 0 or 1, not ", stage,
                     ": stages 2-3 free each unit's full gradients right after its reduction; set "
                     "zero_optimization.stage to 0 or 1");
  }

  ReductionWork start(const ReductionRequest& req) override {
    owner_.exchange(req.unit, req.grads, *req.comm);
    return ReductionWork();
  }

  void finish(const ReductionRequest&, ReductionWork&) override {}

 private:
  GradientExchange& owner_;
};

}  // namespace

std::unique_ptr<GradReduction> make_sum_reduction(std::optional<DType> wire_dtype) {
  return std::make_unique<SumReduction>(wire_dtype);
}

std::unique_ptr<GradReduction> make_optimizer_owned_reduction(GradientExchange& owner) {
  return std::make_unique<OptimizerOwnedReduction>(owner);
}

}  // namespace zt::zero
