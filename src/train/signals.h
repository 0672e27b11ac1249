// Stop signals of `zerotrain train`. The first SIGINT, SIGTERM or SIGUSR1 asks the trainer
// to stop at the next step (or micro-batch) boundary, save a checkpoint and exit 0.
// Further SIGTERMs and SIGUSR1s are absorbed (GNU timeout, Kubernetes and Slurm send
// SIGTERM more than once; a second one must not kill the save). A third SIGINT (a user
// pressing Ctrl-C again), or the grace timeout after the first signal, exits at once
// with 128 + that signal, saying what was saved and what was not.
//
// Generation (the end-of-run samples of `zerotrain train`, `zerotrain generate`) asks
// requested() before each token (train/generate.h, StopCheck): a stop ends it there, not
// after thousands more tokens.
//
// SIGUSR1 is there for mpirun: OpenMPI 4.1 and 5 forward SIGUSR1/SIGUSR2 to every rank,
// while a SIGTERM to mpirun ends the job (docs/launching.md).
#pragma once
#include <cstdint>
#include <string>

namespace zt::train {

struct StopOptions {
  // Seconds from the first signal to the immediate exit (0: none: the save takes what it takes).
  int64_t grace_seconds = 0;
};

// Installs the handlers for the lifetime of the object (RAII; restores the previous ones,
// except after a stop: then they stay to the end of the process, so that the rest of a
// signal pair landing during the teardown is absorbed too). One at a time per process
// (the handler's state is process-wide).
class StopSignals {
 public:
  explicit StopSignals(StopOptions options = {});
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  bool requested() const;
  int signal() const;  // the first signal received, 0 when none

  // What an immediate exit reports (the handler may only write preformatted text): the
  // trainer says when a save starts and which checkpoint the run saved last.
  void saving(int64_t step);
  void saved(const std::string& checkpoint, int64_t step);
  void training();  // the save is over (or was not needed)
};

}  // namespace zt::train
