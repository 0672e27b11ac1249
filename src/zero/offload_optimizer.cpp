#include "zero/offload_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/copy.h"

namespace zt::zero {
namespace {

// Staging buffers are cut at 64-byte boundaries (whole cache lines, aligned vector loads).
int64_t aligned_bytes(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// A partition with nothing in it: the unit belongs to the other optimizer.
UnitPartition empty_partition(const UnitPartition& p) {
  UnitPartition e;
  e.begin = p.begin;
  e.params = Tensor(nullptr, {0}, p.params.dtype(), p.params.device());
  e.grads = Tensor(nullptr, {0}, p.grads.dtype(), p.grads.device());
  e.state_device = p.state_device;
  return e;
}

// A unit's parameters need host staging (and a copy back after the update) unless they
// already live in the engine's host store (offload_param): then the host step acquires
// them there and updates them in place, on the GPU and on the CPU device alike (so that
// the tests run the path a GPU run takes; the staging path is what runs without
// offload_param).
bool params_need_staging(const UnitPartition& p) { return p.param_store == nullptr; }

}  // namespace

OffloadedOptimizer::OffloadedOptimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec,
                                       PartitionFn partitions, OffloadOptions options)
    : registry_(registry), partitions_(std::move(partitions)) {
  if (!(options.ratio > 0 && options.ratio <= 1))
    ZT_THROW_INPUT("zero_optimization.offload_optimizer.ratio = ", options.ratio, " must be in (0, 1]");
  if (!partitions_) partitions_ = [this](size_t u) { return whole_unit(registry_.unit(u)); };
  const size_t units = registry_.size();
  host_units_.resize(units);
  layout_.units = units;

  // Which units step on the host: the last `ratio` of the elements in forward order (the
  // device's units are then the first the next forward needs, and they are ready at once).
  std::vector<UnitPartition> parts;
  for (size_t u = 0; u < units; ++u) {
    parts.push_back(partitions_(u));
    layout_.elements += parts.back().numel();
    // The gradients are on the GPU in a GPU run; the parameters too, unless offload_param
    // keeps them on the host.
    if (parts.back().numel() > 0) gpu_ = gpu_ || parts.back().grads.device().is_cuda();
  }
  const auto device_elements = static_cast<int64_t>((1.0 - options.ratio) * static_cast<double>(layout_.elements));
  int64_t seen = 0;
  int64_t staging = 0;
  for (size_t u = 0; u < units; ++u) {
    const UnitPartition& p = parts[u];
    ZT_CHECK(p.numel() == 0 || p.grads.has_data(), "offload built before unit ", registry_.unit(u).name(),
             " has a gradient partition");
    const bool host = p.numel() > 0 && seen >= device_elements;
    seen += p.numel();
    if (!host) {
      if (gpu_ && p.numel() > 0 && !p.params.device().is_cuda())
        ZT_THROW_INPUT("zero_optimization.offload_optimizer.ratio = ", options.ratio,
                       " steps some units on the GPU, but offload_param keeps their parameters in host memory: use "
                       "ratio 1 with offload_param");
      continue;
    }
    host_order_.push_back(u);
    layout_.host_elements += p.numel();
    staging += aligned_bytes(p.numel() * static_cast<int64_t>(dtype_size(p.grads.dtype())));
    if (params_need_staging(p)) staging += aligned_bytes(p.numel() * static_cast<int64_t>(dtype_size(p.params.dtype())));
    else layout_.params_in_place = true;
  }
  layout_.host_units = host_order_.size();
  layout_.staging_bytes = staging;

  // One exact-size staging allocation, page-locked on the GPU so that the copies are
  // asynchronous and run at the link's speed.
  const Pinning pinning = gpu_ ? options.pinning : Pinning::Pageable;
  staging_ = HostBuffer(static_cast<size_t>(staging), pinning);
  layout_.pinned = staging_.pinned();
  auto* base = static_cast<char*>(staging_.data());
  int64_t at = 0;
  for (size_t u : host_order_) {
    const UnitPartition& p = parts[u];
    HostUnit h;
    h.grads = Tensor(base + at, {p.numel()}, p.grads.dtype());
    at += aligned_bytes(static_cast<int64_t>(h.grads.nbytes()));
    if (params_need_staging(p)) {
      h.params = Tensor(base + at, {p.numel()}, p.params.dtype());
      at += aligned_bytes(static_cast<int64_t>(h.params.nbytes()));
    } else {
      h.params = p.params;  // the engine's (its shape when swapped): acquired and updated in place by the step
      h.params_in_place = true;
    }
    host_units_[u] = std::move(h);
  }
  if (gpu_) {
    to_host_ = std::make_unique<cuda::CopyStream>();
    to_device_ = std::make_unique<cuda::CopyStream>();
  }
  refresh_host_params();

  // The host optimizer over the staging buffers, the device optimizer over the rest.
  std::unique_ptr<StateStore> store;
  if (options.nvme) store = std::make_unique<NvmeStore>(*options.nvme);
  host_ = make_flat_optimizer(
      registry_, spec,
      [this](size_t u) {
        const UnitPartition p = partitions_(u);
        if (!on_host(u)) return empty_partition(p);
        const HostUnit& h = *host_units_[u];
        UnitPartition q{p.begin, h.params, h.grads, Device::cpu()};
        if (h.params_in_place) {  // acquired from the engine's store by the step
          q.param_store = p.param_store;
          q.param_key = p.param_key;
        }
        return q;
      },
      std::move(store));
  if (const NvmeStore* n = nvme_store()) {
    layout_.swap_file = n->swap_file();
    layout_.swap_buffer_bytes = static_cast<int64_t>(n->memory_bytes());
  }
  device_ = make_flat_optimizer(registry_, spec, [this](size_t u) {
    const UnitPartition p = partitions_(u);
    return on_host(u) ? empty_partition(p) : p;
  });
  layout_.host_state_bytes = static_cast<int64_t>(host_->state_bytes());
  layout_.device_state_bytes = static_cast<int64_t>(device_->state_bytes());
}

OffloadedOptimizer::~OffloadedOptimizer() {
  try {
    finish_updates();
  } catch (const std::exception&) {
    // Destructors do not throw; the error was (or will be) reported by the step that hit it.
  }
}

void OffloadedOptimizer::copy_to_host(const Tensor& host_dst, const Tensor& src) {
  if (gpu_) {
    to_host_->wait_for_compute();
    to_host_->to_host(host_dst.data(), src.data(), src.nbytes());
  } else {
    std::memcpy(host_dst.data(), src.data(), src.nbytes());
  }
}

void OffloadedOptimizer::copy_to_device(const Tensor& dst, const Tensor& host_src, cuda::CopyEvent* done) {
  if (gpu_) {
    to_device_->to_device(dst.data(), host_src.data(), host_src.nbytes());
    *done = to_device_->record();
  } else {
    std::memcpy(dst.data(), host_src.data(), host_src.nbytes());
  }
}

void OffloadedOptimizer::refresh_host_params() {
  finish_updates();
  for (size_t u : host_order_) {
    HostUnit& h = *host_units_[u];
    if (h.params_in_place) continue;
    copy_to_host(h.params, partitions_(u).params);
    h.grads_copied = gpu_ ? to_host_->record() : cuda::CopyEvent();
    h.grads_copied.wait();
  }
}

// ---- the step -------------------------------------------------------------------------

void OffloadedOptimizer::step(float lr, float grad_scale) {
  finish_updates();  // the previous step's (normally long done: the forward waited for it)
  // Weights loaded after construction (a resumed or HF-initialised run) reach the host
  // copies before the host optimizer takes its master from them.
  if (host_->steps_taken() == 0) refresh_host_params();
  device_->step(lr, grad_scale);  // queued on the GPU: its units are ready for the forward first
  host_->begin_step();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t u : host_order_) host_units_[u]->update_pending = true;
  }
  worker_.submit([this, lr, grad_scale] { host_step(lr, grad_scale); });
}

void OffloadedOptimizer::host_step(float lr, float grad_scale) {
  try {
    for (size_t i = 0; i < host_order_.size(); ++i) {
      const size_t u = host_order_[i];
      HostUnit& h = *host_units_[u];
      // NVMe: the next unit's state is read while this one steps (pipeline_read).
      if (i + 1 < host_order_.size()) host_->prefetch_unit(host_order_[i + 1]);
      h.grads_copied.wait();  // the gradients are on the host
      host_->step_unit(u, lr, grad_scale);
      cuda::CopyEvent copied;
      if (!h.params_in_place) copy_to_device(partitions_(u).params, h.params, &copied);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        h.params_copied = std::move(copied);
        h.order_pending = gpu_ && !h.params_in_place;
        h.update_pending = false;
      }
      updated_.notify_all();
    }
  } catch (...) {
    // Wake every waiter: the error reaches them through the worker.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t u : host_order_) host_units_[u]->update_pending = false;
    }
    updated_.notify_all();
    throw;
  }
}

void OffloadedOptimizer::finish_updates() {
  worker_.wait_idle();
  for (size_t u : host_order_) before_params_used(u);
}

// ---- the engine's hooks ---------------------------------------------------------------

void OffloadedOptimizer::gradient_ready(size_t unit, const Tensor& grads) {
  if (!on_host(unit)) return;
  HostUnit& h = *host_units_[unit];
  ZT_CHECK(grads.numel() == h.grads.numel() && grads.dtype() == h.grads.dtype(), "unit ",
           registry_.unit(unit).name(), ": its gradient partition changed shape or dtype after the optimizer was built");
  copy_to_host(h.grads, grads);
  if (gpu_) h.grads_copied = to_host_->record();
}

void OffloadedOptimizer::before_gradients_reset() {
  // The device's gradient buffers are about to be zeroed: after their copies to the host.
  for (size_t u : host_order_) {
    HostUnit& h = *host_units_[u];
    h.grads_copied.order_compute_after();
  }
}

void OffloadedOptimizer::before_params_used(size_t unit) {
  if (!on_host(unit)) return;
  HostUnit& h = *host_units_[unit];
  std::unique_lock<std::mutex> lock(mutex_);
  if (h.update_pending) updated_.wait(lock, [&] { return !h.update_pending; });
  if (h.order_pending) {
    h.params_copied.order_compute_after();  // the GPU waits for the copy; the host does not
    h.order_pending = false;
  }
  lock.unlock();
  worker_.check();
}

// ---- state ----------------------------------------------------------------------------

std::vector<StateSlice> OffloadedOptimizer::state_slices() {
  finish_updates();
  std::vector<StateSlice> out = device_->state_slices();
  std::vector<StateSlice> host = host_->state_slices();
  out.insert(out.end(), std::make_move_iterator(host.begin()), std::make_move_iterator(host.end()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> OffloadedOptimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (StateSlice& s : state_slices()) out.emplace_back(std::move(s.name), s.data);
  return out;
}

void OffloadedOptimizer::set_steps_taken(int64_t steps) {
  finish_updates();
  host_->set_steps_taken(steps);
  device_->set_steps_taken(steps);
}

size_t OffloadedOptimizer::state_bytes() const { return host_->state_bytes() + device_->state_bytes(); }

const NvmeStore* OffloadedOptimizer::nvme_store() const {
  return dynamic_cast<const NvmeStore*>(&host_->state_store());
}

void OffloadedOptimizer::set_betas(float beta1, float beta2) {
  finish_updates();
  host_->set_betas(beta1, beta2);
  device_->set_betas(beta1, beta2);
}

void OffloadedOptimizer::init_master_from_params() {
  refresh_host_params();
  host_->init_master_from_params();
  device_->init_master_from_params();
}

}  // namespace zt::zero
