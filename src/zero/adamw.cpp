#include "zero/adamw.h"

#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"

namespace zt::zero {

AdamW::AdamW(model::ParameterRegistry& registry, AdamWConfig config) : registry_(registry), config_(config) {
  for (auto& u : registry_.units()) {
    UnitState s;
    const Device dev = u->flat_params().device();
    s.m = OwnedTensor::zeros({u->padded_numel()}, DType::F32, dev);
    s.v = OwnedTensor::zeros({u->padded_numel()}, DType::F32, dev);
    if (u->param_dtype() != DType::F32) {
      s.master = OwnedTensor({u->padded_numel()}, DType::F32, dev);
      s.master->copy_from(u->flat_params());
    }
    state_.push_back(std::move(s));
  }
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  ops::AdamWHyper h;
  h.lr = lr;
  h.beta1 = config_.beta1;
  h.beta2 = config_.beta2;
  h.eps = config_.eps;
  h.step = step_;
  h.grad_scale = grad_scale;
  h.decoupled = config_.decoupled;
  h.bias_correction = config_.bias_correction;
  for (size_t ui = 0; ui < registry_.size(); ++ui) {
    model::Unit& u = registry_.unit(ui);
    ZT_CHECK(u.has_grads(), "optimizer step without gradients for unit ", u.name());
    UnitState& s = state_[ui];
    const Tensor flat_p = u.flat_params(), flat_g = u.flat_grads();
    for (const model::ParamEntry& p : u.params()) {
      h.weight_decay = p.spec.decay == model::WeightDecay::Apply ? config_.weight_decay : 0.0f;
      const int64_t off = p.offset, n = p.numel();
      ops::adamw_step(flat_p.narrow(0, off, n), s.master.view().data() ? s.master->narrow(0, off, n) : Tensor(),
                      flat_g.narrow(0, off, n), s.m->narrow(0, off, n), s.v->narrow(0, off, n), h);
    }
  }
}

size_t AdamW::state_bytes() const {
  size_t n = 0;
  for (const auto& s : state_) n += s.m->nbytes() + s.v->nbytes() + (s.master.view().data() ? s.master->nbytes() : 0);
  return n;
}

double global_grad_norm(model::ParameterRegistry& registry) {
  double sum = 0.0;
  for (auto& u : registry.units())
    if (u->has_grads()) sum += ops::sum_of_squares(u->flat_grads());
  return std::sqrt(sum);
}

}  // namespace zt::zero
