#include "model/registry.h"

#include "core/error.h"

namespace zt::model {
namespace {
// Every parameter starts on a 64-element boundary: 256-byte aligned in f32, so that
// vector loads and device copies of one parameter never straddle another.
constexpr int64_t kParamAlignment = 64;
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
}  // namespace

Unit::Unit(std::string name, std::vector<ParamSpec> specs, int shard_count) : name_(std::move(name)) {
  ZT_CHECK(shard_count >= 1, "shard_count must be >= 1");
  int64_t offset = 0;  // end of the previous parameter
  for (ParamSpec& spec : specs) {
    if (spec.hf_shape.empty()) spec.hf_shape = spec.shape;
    ParamEntry e;
    if (spec.placement == ParamSpec::Placement::Aligned) offset = round_up(offset, kParamAlignment);
    e.offset = offset;
    offset += shape_numel(spec.shape);
    e.spec = std::move(spec);
    params_.push_back(std::move(e));
  }
  numel_ = offset;
  padded_numel_ = round_up(std::max<int64_t>(numel_, 1), shard_count);
}

ParamEntry* Unit::find(const std::string& name) {
  for (auto& p : params_)
    if (p.spec.name == name) return &p;
  return nullptr;
}

void Unit::allocate_params(DType dtype, Device device) {
  allocate_params_uninitialized(dtype, device);
  param_buffer_.zero();
}

void Unit::release_params() {
  param_buffer_.reset();
  for (auto& p : params_) p.value = Tensor();
}

void Unit::allocate_params_uninitialized(DType dtype, Device device) {
  param_dtype_ = dtype;
  device_ = device;
  param_buffer_ = Buffer(static_cast<size_t>(padded_numel_) * dtype_size(dtype), device);
  char* base = static_cast<char*>(param_buffer_.data());
  for (auto& p : params_)
    p.value =
        Tensor(base + p.offset * static_cast<int64_t>(dtype_size(dtype)), p.spec.shape, dtype, device, p.spec.name);
}

void Unit::allocate_grads(DType dtype, Device device) {
  ZT_CHECK(!frozen(), "unit ", name_, " is frozen: it has no gradient buffer");
  grad_dtype_ = dtype;
  grad_buffer_ = Buffer(static_cast<size_t>(padded_numel_) * dtype_size(dtype), device);
  grad_buffer_.zero();
  char* base = static_cast<char*>(grad_buffer_.data());
  for (auto& p : params_)
    p.grad = Tensor(base + p.offset * static_cast<int64_t>(dtype_size(dtype)), p.spec.shape, dtype, device,
                    p.spec.name + ".grad");
}

void Unit::set_training(Training training) {
  training_ = training;
  if (frozen()) release_grads();
}

void Unit::release_grads() {
  grad_buffer_.reset();
  for (auto& p : params_) p.grad = Tensor();
}

Tensor Unit::flat_params() const {
  return Tensor(param_buffer_.data(), {padded_numel_}, param_dtype_, device_, name_ + ".flat");
}

Tensor Unit::flat_grads() const {
  return Tensor(grad_buffer_.data(), {padded_numel_}, grad_dtype_, device_, name_ + ".flat_grad");
}

Unit& ParameterRegistry::add_unit(std::string name, std::vector<ParamSpec> specs, int shard_count) {
  units_.push_back(std::make_unique<Unit>(std::move(name), std::move(specs), shard_count));
  return *units_.back();
}

void ParameterRegistry::for_each(const std::function<void(Unit&, ParamEntry&)>& fn) {
  for (auto& u : units_)
    for (auto& p : u->params()) fn(*u, p);
}

void ParameterRegistry::for_each(const std::function<void(const Unit&, const ParamEntry&)>& fn) const {
  for (const auto& u : units_)
    for (const auto& p : u->params()) fn(*u, p);
}

ParamEntry* ParameterRegistry::find(const std::string& name) {
  for (auto& u : units_)
    if (ParamEntry* p = u->find(name)) return p;
  return nullptr;
}

int64_t ParameterRegistry::total_numel() const {
  int64_t n = 0;
  for (const auto& u : units_)
    for (const auto& p : u->params()) n += p.numel();
  return n;
}

}  // namespace zt::model
