// One host thread that runs submitted jobs in order: ZeRO-Offload's optimizer step runs
// there while the caller's thread goes on queueing GPU work (the next forward). A job's
// exception is kept and rethrown by the next wait_idle() (or check()), never lost, and a
// failed job does not stop the later ones from being dropped cleanly.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zt::zero {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();  // finishes the queued jobs, then joins (their errors are dropped)
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  void submit(std::function<void()> job);
  // Blocks until every submitted job has run; rethrows the first error since the last call.
  void wait_idle();
  // Rethrows (and clears) a job's error without waiting.
  void check();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace zt::zero
