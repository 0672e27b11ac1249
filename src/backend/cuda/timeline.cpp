// cuda::Timeline (backend/cuda_api.h): timing events on the compute stream, kept in a pool
// so that marking every unit of every profiled step creates each event once.
#include <string>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/stream.h"
#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cuda {

struct Timeline::Impl {
  std::vector<Event> events;  // events[0 .. used) are this round's marks
  std::vector<std::string> labels;
  size_t used = 0;
};

Timeline::Timeline() : impl_(std::make_unique<Impl>()) {
  ZT_CHECK(initialized(), "cuda::Timeline needs cuda::init() first");
}

Timeline::~Timeline() = default;

void Timeline::mark(const std::string& label) {
  Impl& m = *impl_;
  if (m.used == m.events.size()) {
    m.events.emplace_back(/*timing=*/true);
    m.labels.emplace_back();
  }
  m.events[m.used].record(compute_stream());
  m.labels[m.used] = label;
  ++m.used;
}

std::vector<Timeline::Interval> Timeline::intervals() const {
  const Impl& m = *impl_;
  std::vector<Interval> out;
  if (m.used < 2) return out;
  m.events[m.used - 1].synchronize();
  out.reserve(m.used - 1);
  for (size_t i = 0; i + 1 < m.used; ++i)
    out.push_back({m.labels[i], static_cast<double>(Event::elapsed_ms(m.events[i], m.events[i + 1]))});
  return out;
}

void Timeline::clear() { impl_->used = 0; }

}  // namespace zt::cuda
