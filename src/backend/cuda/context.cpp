// available(), init() and the statistics of backend/cuda_api.h for the CUDA build.
#include "backend/cuda/context.h"

#include <atomic>
#include <mutex>

#include "backend/cuda/check.h"
#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/log.h"

namespace zt::cuda {
namespace {

std::mutex g_init_mutex;
std::atomic<Context*> g_context{nullptr};

}  // namespace

Context::Context(int device_index)
    : device(device_index),
      props([&] {
        ZT_CUDA_CHECK(cudaSetDevice(device_index));
        cudaDeviceProp p{};
        ZT_CUDA_CHECK(cudaGetDeviceProperties(&p, device_index));
        return p;
      }()),
      compute(),
      allocator(device_index, compute.get()),
      blaslt(allocator) {}

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for us
    return 0;
  }
  return count;
}

bool available() noexcept {
  static const bool has_gpu = device_count() > 0;
  return has_gpu;
}

void init(int device) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (Context* ctx = g_context.load()) {
    if (ctx->device == device) return;
    ZT_THROW_UNSUPPORTED("cuda::init(", device, "): this process already uses cuda:", ctx->device,
                         " (one GPU per process; select it with the rank's "
                         "local index or CUDA_VISIBLE_DEVICES)");
  }
  const int count = device_count();
  if (count == 0)
    ZT_THROW_UNSUPPORTED("cuda::init(", device,
                         "): no GPU is visible (check the driver, "
                         "nvidia-smi and CUDA_VISIBLE_DEVICES), or use --device cpu");
  if (device < 0 || device >= count)
    ZT_THROW_INPUT("device cuda:", device, " does not exist: ", count, " GPU(s) visible");
  auto* ctx = new Context(device);  // never deleted: see context.h
  set_device_allocator(DeviceType::CUDA, &ctx->allocator);
  g_context.store(ctx);
  ZT_INFO("cuda:", device, ": ", ctx->props.name, ", sm_", ctx->props.major, ctx->props.minor, ", ",
          ctx->props.totalGlobalMem >> 20, " MiB");
}

bool initialized() noexcept { return g_context.load() != nullptr; }

int current_device() noexcept {
  const Context* ctx = g_context.load();
  return ctx ? ctx->device : -1;
}

Context& context() {
  Context* ctx = g_context.load();
  if (!ctx) ZT_THROW_UNSUPPORTED("the CUDA backend is not initialized: call zt::cuda::init()");
  return *ctx;
}

void synchronize() {
  if (Context* ctx = g_context.load()) ctx->compute.synchronize();
}

MemoryStats memory_stats() {
  const Context* ctx = g_context.load();
  return ctx ? ctx->allocator.stats() : MemoryStats{};
}
size_t bytes_in_use() { return memory_stats().bytes_in_use; }
size_t peak_bytes() { return memory_stats().peak_bytes; }
size_t bytes_reserved() { return memory_stats().bytes_reserved; }

void reset_peak_bytes() {
  if (Context* ctx = g_context.load()) ctx->allocator.reset_peak();
}

void empty_cache() {
  if (Context* ctx = g_context.load()) ctx->allocator.empty_cache();
}

void copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = compute_stream();
  ZT_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = compute_stream();
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Allocator& pinned_host_allocator() {
  // Pinned memory needs a working driver but not init(): the host side may allocate first.
  static PinnedHostAllocator allocator;
  if (!available()) ZT_THROW_UNSUPPORTED("pinned host memory needs a GPU, and none is visible");
  return allocator;
}

}  // namespace zt::cuda
