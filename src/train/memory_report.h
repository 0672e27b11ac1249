// memory_breakdown: memory by category, once at the start and at every log step (as
// DeepSpeed's see_memory_usage does with memory_breakdown: true).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zt::train {

struct TrainingRun;

struct MemoryBreakdown {
  // Model states this rank holds (the ZeRO engine's accounting; on the run's device).
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t engine_buffers_peak = 0;  // gathered units, full gradients in flight, comm buffers
  // Activations, workspaces and everything else at the peak: the device's peak minus the
  // model states (GPU: the caching allocator's peak; CPU: peak RSS, which also holds the
  // program, data and libraries).
  int64_t other_peak = 0;
  int64_t host_rss = 0, host_peak_rss = 0;
  bool gpu = false;
  int64_t gpu_in_use = 0, gpu_peak = 0, gpu_reserved = 0;

  // "memory | parameters 3.4 MiB | gradients ... | host RSS ... | gpu in use ..."
  std::string line() const;
  nlohmann::json to_json() const;
};

MemoryBreakdown memory_breakdown(const TrainingRun& run);

}  // namespace zt::train
