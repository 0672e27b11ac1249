// cuda::CopyStream, CopyEvent and HostRegistration (backend/cuda_api.h): host<->device
// copies on a stream of their own, ordered against the compute stream by events only.
#include <utility>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/stream.h"
#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cuda {

struct CopyEvent::Impl {
  Event event;
};

CopyEvent::CopyEvent() = default;
CopyEvent::~CopyEvent() = default;
CopyEvent::CopyEvent(CopyEvent&& other) noexcept = default;
CopyEvent& CopyEvent::operator=(CopyEvent&& other) noexcept = default;

bool CopyEvent::done() const { return !impl_ || impl_->event.query(); }

void CopyEvent::wait() const {
  if (impl_) impl_->event.synchronize();
}

void CopyEvent::order_compute_after() const {
  if (impl_) context().compute.wait(impl_->event);
}

struct CopyStream::Impl {
  Stream stream;
  Event compute_mark;  // reused: where the compute stream was at wait_for_compute()
};

CopyStream::CopyStream() {
  ZT_CHECK(initialized(), "cuda::CopyStream needs cuda::init() first");
  impl_ = std::make_unique<Impl>();
}

CopyStream::~CopyStream() {
  if (impl_) ZT_CUDA_WARN(cudaStreamSynchronize(impl_->stream.get()));
}

void CopyStream::wait_for_compute() {
  impl_->compute_mark.record(compute_stream());
  impl_->stream.wait(impl_->compute_mark);
}

void CopyStream::to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, impl_->stream.get()));
}

void CopyStream::to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->stream.get()));
}

CopyEvent CopyStream::record() {
  CopyEvent e;
  e.impl_ = std::make_unique<CopyEvent::Impl>();
  e.impl_->event.record(impl_->stream.get());
  return e;
}

void CopyStream::synchronize() { impl_->stream.synchronize(); }

HostRegistration::HostRegistration(void* host, size_t bytes) : host_(host), bytes_(bytes) {
  ZT_CHECK(initialized(), "cuda::HostRegistration needs cuda::init() first");
  if (bytes == 0) {
    host_ = nullptr;
    return;
  }
  const cudaError_t err = cudaHostRegister(host, bytes, cudaHostRegisterDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next CUDA call must not report it again
    host_ = nullptr;
    ZT_THROW_INPUT("cannot pin ", bytes, " bytes of host memory (cudaHostRegister: ", cudaGetErrorString(err),
                   "): check `ulimit -l` (locked memory) and free host memory, or turn pin_memory off");
  }
}

HostRegistration::~HostRegistration() {
  if (host_) ZT_CUDA_WARN(cudaHostUnregister(host_));
}

}  // namespace zt::cuda
