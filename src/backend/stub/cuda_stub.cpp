// Built when the CUDA backend is off (ZT_WITH_CUDA=OFF): the same functions as
// src/backend/cuda/, declared in backend/cuda_api.h. available() is false, the statistics
// are zero, and everything that needs a GPU throws Unsupported with the fix in the message.
// The device allocator is never registered, so any use of a CUDA device fails with a clear
// message from core/allocator.cpp.
#include "backend/cuda_api.h"

#include "backend/stub/no_cuda.h"
#include "core/error.h"

namespace zt::cuda {

bool available() noexcept { return false; }
int device_count() noexcept { return 0; }
VersionInfo versions() noexcept { return {}; }
DeviceInfo device_info(int device) { no_cuda(str("cuda::device_info(", device, ")").c_str()); }
size_t free_device_memory() noexcept { return 0; }
void init(int device) { no_cuda(str("cuda::init(", device, ")").c_str()); }
bool initialized() noexcept { return false; }
int current_device() noexcept { return -1; }
void synchronize() {}

MemoryStats memory_stats() { return {}; }
size_t bytes_in_use() { return 0; }
size_t peak_bytes() { return 0; }
size_t bytes_reserved() { return 0; }
void reset_peak_bytes() {}
void empty_cache() {}

void copy_to_device(void*, const void*, size_t) { no_cuda("cuda::copy_to_device"); }
void copy_to_host(void*, const void*, size_t) { no_cuda("cuda::copy_to_host"); }
void copy_on_device(void*, const void*, size_t) { no_cuda("cuda::copy_on_device"); }
void convert_on_device(const void*, DType, void*, DType, size_t) { no_cuda("cuda::convert_on_device"); }

void set_gemm_autotune(bool) {}
bool gemm_autotune() { return false; }

struct Timeline::Impl {};
Timeline::Timeline() { no_cuda("cuda::Timeline"); }
Timeline::~Timeline() = default;
void Timeline::mark(const std::string&) { no_cuda("cuda::Timeline::mark"); }
std::vector<Timeline::Interval> Timeline::intervals() const { no_cuda("cuda::Timeline::intervals"); }
void Timeline::clear() {}

struct CopyEvent::Impl {};
CopyEvent::CopyEvent() = default;  // never recorded: done
CopyEvent::~CopyEvent() = default;
CopyEvent::CopyEvent(CopyEvent&&) noexcept = default;
CopyEvent& CopyEvent::operator=(CopyEvent&&) noexcept = default;
bool CopyEvent::done() const { return true; }
void CopyEvent::wait() const {}
void CopyEvent::order_compute_after() const {}

struct CopyStream::Impl {};
CopyStream::CopyStream() { no_cuda("cuda::CopyStream"); }
CopyStream::~CopyStream() = default;
void CopyStream::wait_for_compute() { no_cuda("cuda::CopyStream"); }
void CopyStream::to_host(void*, const void*, size_t) { no_cuda("cuda::CopyStream"); }
void CopyStream::to_device(void*, const void*, size_t) { no_cuda("cuda::CopyStream"); }
CopyEvent CopyStream::record() { no_cuda("cuda::CopyStream"); }
void CopyStream::synchronize() { no_cuda("cuda::CopyStream"); }

HostRegistration::HostRegistration(void*, size_t) { no_cuda("cuda::HostRegistration (pinned host memory)"); }
HostRegistration::~HostRegistration() = default;

Allocator& pinned_host_allocator() { no_cuda("pinned host memory"); }

void convert_on_device_for_test(const void*, DType, void*, DType, size_t, size_t) {
  no_cuda("cuda::convert_on_device_for_test");
}

}  // namespace zt::cuda
