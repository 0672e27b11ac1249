#include "zero/optimizer_base.h"

#include "core/error.h"

namespace zt::zero {

FlatOptimizer::FlatOptimizer(model::ParameterRegistry& registry, OptimizerSpec spec,
                             std::vector<std::string> state_names)
    : spec_(spec), registry_(registry), state_names_(std::move(state_names)) {
  for (auto& u : registry_.units()) {
    ZT_CHECK(u->has_params(), "optimizer built before unit ", u->name(), " has parameters");
    UnitState s;
    const Device dev = u->flat_params().device();
    for (size_t i = 0; i < state_names_.size(); ++i)
      s.state.push_back(OwnedTensor::zeros({u->padded_numel()}, DType::F32, dev));
    if (u->param_dtype() != DType::F32) s.master = OwnedTensor({u->padded_numel()}, DType::F32, dev);
    units_.push_back(std::move(s));
  }
  copy_params_to_master();
}

void FlatOptimizer::copy_params_to_master() {
  for (size_t ui = 0; ui < units_.size(); ++ui)
    if (units_[ui].master.view().data()) units_[ui].master->copy_from(registry_.unit(ui).flat_params());
}

void FlatOptimizer::step(float lr, float grad_scale) {
  ZT_CHECK(registry_.size() == units_.size(), "the registry changed after the optimizer was built");
  // Weights loaded after the optimizer was built must reach the master before it is used.
  if (steps_ == 0) copy_params_to_master();
  ++steps_;
  Range r;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    model::Unit& u = registry_.unit(ui);
    ZT_CHECK(u.has_grads(), "optimizer step without gradients for unit ", u.name());
    UnitState& s = units_[ui];
    const Tensor flat_p = u.flat_params(), flat_g = u.flat_grads();
    const bool has_master = s.master.view().data() != nullptr;
    for (const model::ParamEntry& p : u.params()) {
      const int64_t off = p.offset, n = p.numel();
      r.param = flat_p.narrow(0, off, n).with_name(p.name());
      r.grad = flat_g.narrow(0, off, n);
      r.master = has_master ? s.master->narrow(0, off, n) : Tensor();
      r.state.clear();
      for (auto& t : s.state) r.state.push_back(t->narrow(0, off, n));
      r.weight_decay = p.spec.decay == model::WeightDecay::Apply ? spec_.weight_decay : 0.0f;
      update(r, lr, grad_scale);
    }
  }
}

void FlatOptimizer::set_steps_taken(int64_t steps) {
  if (steps < 0) ZT_THROW_INPUT("optimizer step count ", steps, " is negative: the checkpoint is corrupt");
  steps_ = steps;
}

std::vector<std::pair<std::string, Tensor>> FlatOptimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const std::string& unit = registry_.unit(ui).name();
    if (units_[ui].master.view().data()) out.emplace_back(unit + ".master", units_[ui].master.view());
    for (size_t si = 0; si < state_names_.size(); ++si)
      out.emplace_back(unit + "." + state_names_[si], units_[ui].state[si].view());
  }
  return out;
}

size_t FlatOptimizer::state_bytes() const {
  size_t n = 0;
  for (const auto& s : units_) {
    if (s.master.view().data()) n += s.master->nbytes();
    for (const auto& t : s.state) n += t->nbytes();
  }
  return n;
}

void FlatOptimizer::set_betas(float beta1, float beta2) {
  spec_.beta1 = beta1;
  spec_.beta2 = beta2;
}

}  // namespace zt::zero
