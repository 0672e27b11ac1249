// The CUDA backend's public face, with no CUDA types in it, so that every layer (and the
// tests) can use it in any build. A CUDA build defines these in src/backend/cuda/; a
// CPU-only build defines them in src/backend/stub/cuda_stub.cpp, where available() is
// false and everything that needs a GPU throws Unsupported with a clear message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"

namespace zt::cuda {

// True when this build has the CUDA backend and at least one GPU is visible. Never throws.
bool available() noexcept;
// Number of visible GPUs (0 in a CPU-only build or with no driver). Never throws.
int device_count() noexcept;

// Versions of the CUDA libraries, for `zerotrain report`; CUDA's encoding (13000 = 13.0,
// cuBLAS: major*10000 + minor*100 + patch), 0 where not built or unknown. Never throws.
struct VersionInfo {
  int runtime_compiled = 0;  // CUDART_VERSION the backend was compiled with
  int runtime = 0;           // the loaded libcudart (cudaRuntimeGetVersion)
  int driver = 0;            // newest CUDA the driver supports (cudaDriverGetVersion; 0: no driver)
  int cublas_compiled = 0;   // CUBLAS_VERSION
  int64_t cublaslt = 0;      // the loaded libcublasLt (cublasLtGetVersion)
};
VersionInfo versions() noexcept;

// What a visible GPU is (needs no init()). Throws BadInput for an index outside
// [0, device_count()); the CPU-only stub throws Unsupported.
struct DeviceInfo {
  std::string name;
  size_t total_memory = 0;   // bytes
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  // "GPU-8f0c1a2b-...": the same in every process that sees this GPU, whatever its index
  // there (CUDA_VISIBLE_DEVICES), and different for every other GPU or MIG instance: how
  // ranks tell that they share a device.
  std::string uuid;
};
DeviceInfo device_info(int device);
// Free memory of the current device (cudaMemGetInfo: other processes' use counted), in
// bytes; 0 when it cannot be asked (no init(), the CPU-only stub).
size_t free_device_memory() noexcept;

// Selects the GPU for this process, creates its compute stream, cuBLASLt handle and caching
// allocator, and registers the allocator for Device::cuda() (core/allocator.h). Calling it
// again with the same device does nothing; another device throws (one GPU per process).
void init(int device = 0);
bool initialized() noexcept;
// The device passed to init(), or -1.
int current_device() noexcept;

// Waits until all work queued on the compute stream has finished.
void synchronize();

// Device memory statistics of the caching allocator (all zero before init()).
struct MemoryStats {
  size_t bytes_in_use = 0;    // live allocations, in rounded (size-class) bytes
  size_t peak_bytes = 0;      // maximum of bytes_in_use since init() or reset_peak_bytes()
  size_t bytes_reserved = 0;  // obtained from the driver: in use + cached free blocks
  size_t device_mallocs = 0;  // cudaMalloc calls so far
  size_t device_frees = 0;    // cudaFree calls so far
};
MemoryStats memory_stats();
size_t bytes_in_use();
size_t peak_bytes();
size_t bytes_reserved();
void reset_peak_bytes();
// Returns every cached free block to the driver (synchronizes the compute stream first).
void empty_cache();

// Synchronous copies between host memory and device memory from the device allocator,
// ordered on the compute stream (they wait for the work queued before them). Need init().
void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);

// Device-to-device copy and dtype conversion (f32 <-> bf16, f32 <-> f16, bf16 <-> f16 through
// f32, or a plain copy for equal dtypes), queued on the compute stream (no host wait).
void copy_on_device(void* device_dst, const void* device_src, size_t bytes);
void convert_on_device(const void* device_src, DType src_dtype, void* device_dst, DType dst_dtype, size_t n);

// cuBLASLt algorithm autotuning (backend/cuda/matmul.cpp): off by default, or as
// ZT_GEMM_AUTOTUNE=1 sets it. When on, a GEMM problem's first call times the heuristic's
// top candidates and keeps the fastest (one host wait per new problem). Affects only
// problems first seen after the change.
void set_gemm_autotune(bool on);
bool gemm_autotune();

// Labelled marks on the compute stream's timeline (CUDA timing events), for profiles of
// where a step's GPU time goes without a profiler. mark() queues an event (no host wait);
// intervals() waits once for the last mark and returns, for every mark but the last, its
// label and the milliseconds of GPU time until the next mark. Events are reused after
// clear(). Needs init(); the CPU-only stub throws Unsupported.
class Timeline {
 public:
  Timeline();
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  void mark(const std::string& label);
  struct Interval {
    std::string label;
    double ms = 0;
  };
  std::vector<Interval> intervals() const;
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Copies that overlap compute (the seam ZeRO-Offload streams gradients and parameters
// through): a stream of its own beside the compute stream, ordered against it only by
// events. A copy reads and writes its buffers later, on the GPU's time: keep both alive and
// unchanged until its event is done() (the caching allocator reuses freed device blocks in
// compute-stream order and knows nothing of this stream). The host side should be pinned
// (pinned_host_allocator, HostRegistration) to overlap; pageable memory is copied
// synchronously by the driver.
class CopyEvent {
 public:
  CopyEvent();
  ~CopyEvent();
  CopyEvent(CopyEvent&& other) noexcept;
  CopyEvent& operator=(CopyEvent&& other) noexcept;
  CopyEvent(const CopyEvent&) = delete;
  CopyEvent& operator=(const CopyEvent&) = delete;

  // True when the work recorded before it has finished (an event never recorded: true).
  bool done() const;
  // Blocks the host until then.
  void wait() const;
  // The compute stream's later work waits for it (no host wait).
  void order_compute_after() const;

 private:
  friend class CopyStream;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CopyStream {
 public:
  // Needs init(); the CPU-only stub throws Unsupported.
  CopyStream();
  ~CopyStream();  // waits for its copies (their buffers may be freed right after)
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  // This stream's later copies wait for the compute work queued so far (e.g. the kernel
  // that produced a gradient), with no host wait.
  void wait_for_compute();
  // Asynchronous copies in stream order.
  void to_host(void* host_dst, const void* device_src, size_t bytes);
  void to_device(void* device_dst, const void* host_src, size_t bytes);
  // An event after the copies queued so far.
  CopyEvent record();
  // Blocks the host until every copy queued so far has finished.
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Existing host memory page-locked in place (cudaHostRegister) for the lifetime of this
// object: exact-size pinned buffers (page-aligned allocations of any size) instead of a
// pool's power-of-two blocks. Throws Unsupported in a CPU-only build, BadInput when the
// driver refuses (the message names the bytes and the locked-memory limit to check).
class HostRegistration {
 public:
  HostRegistration(void* host, size_t bytes);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  size_t bytes() const { return bytes_; }

 private:
  void* host_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaHostAlloc) for fast, asynchronous host<->device copies.
// Its device() is Device::cpu(). Throws Unsupported in a CPU-only build.
Allocator& pinned_host_allocator();

// Test helper: copies n elements from host src to the device, converts them there with the
// backend's conversion kernel (f32 <-> bf16, f32 <-> f16, or a same-dtype copy) and copies the
// result back to host dst. `misalign` shifts both device pointers by that many elements, so
// that the unaligned (scalar) paths of the kernel are tested too. Needs init().
void convert_on_device_for_test(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                                size_t misalign = 0);

}  // namespace zt::cuda
