#include "train/memory_report.h"

#include <algorithm>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "train/metrics.h"
#include "train/training_run.h"

namespace zt::train {

MemoryBreakdown memory_breakdown(const TrainingRun& run) {
  MemoryBreakdown m;
  const zero::ModelStateBytes s = run.engine->memory(static_cast<int64_t>(run.optimizer->state_bytes()));
  m.params = s.params;
  m.grads = s.grads;
  m.optimizer = s.optimizer;
  m.engine_buffers_peak = s.buffers_peak;
  const MemoryUsage host = host_memory();
  m.host_rss = host.rss_bytes;
  m.host_peak_rss = host.peak_rss_bytes;
  m.gpu = cuda::initialized();
  int64_t device_peak = m.host_peak_rss;
  if (m.gpu) {
    const cuda::MemoryStats g = cuda::memory_stats();
    m.gpu_in_use = static_cast<int64_t>(g.bytes_in_use);
    m.gpu_peak = static_cast<int64_t>(g.peak_bytes);
    m.gpu_reserved = static_cast<int64_t>(g.bytes_reserved);
    device_peak = m.gpu_peak;
  }
  m.other_peak = std::max<int64_t>(0, device_peak - s.model_states());
  return m;
}

std::string MemoryBreakdown::line() const {
  const auto h = [](int64_t b) { return human_bytes(static_cast<double>(b)); };
  std::string s = str("memory | parameters ", h(params), " | gradients ", h(grads), " | optimizer state ", h(optimizer),
                      " | engine buffers peak ", h(engine_buffers_peak), " | activations and other, peak ",
                      h(other_peak), " | host RSS ", h(host_rss), " (peak ", h(host_peak_rss), ")");
  if (gpu) s += str(" | gpu in use ", h(gpu_in_use), ", peak ", h(gpu_peak), ", reserved ", h(gpu_reserved));
  return s;
}

nlohmann::json MemoryBreakdown::to_json() const {
  nlohmann::json j = {{"params_bytes", params},
                      {"grads_bytes", grads},
                      {"optimizer_bytes", optimizer},
                      {"engine_buffers_peak_bytes", engine_buffers_peak},
                      {"other_peak_bytes", other_peak},
                      {"host_rss_bytes", host_rss},
                      {"host_peak_rss_bytes", host_peak_rss}};
  if (gpu) {
    j["gpu_in_use_bytes"] = gpu_in_use;
    j["gpu_peak_bytes"] = gpu_peak;
    j["gpu_reserved_bytes"] = gpu_reserved;
  }
  return j;
}

}  // namespace zt::train
