#include "train/signals.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>

namespace zt::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;   // the first stop signal
volatile std::sig_atomic_t g_sigints = 0;  // SIGINTs received, the first one included
volatile std::sig_atomic_t g_grace = 0;    // seconds for alarm() at the first signal

// The immediate exit's message, written by the trainer outside the handler: two buffers
// and an index flipped after the new text is complete, so the handler never reads a
// half-written one.
char g_text[2][768];
volatile std::sig_atomic_t g_current = 0;
std::string g_last_saved;  // trainer side only
int64_t g_last_saved_step = -1;

struct sigaction g_old_int, g_old_term, g_old_usr1, g_old_alrm;

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// The handler path that must end the process now: only async-signal-safe calls, and
// _exit (no destructors, no atexit, no stdio flush: the process may be inside malloc or
// a write). The documented exception to "no exit() in library code".
[[noreturn]] void exit_now(const char* why, int code) {
  write_all("zerotrain: ");
  write_all(why);
  write_all(": exiting at once; ");
  write_all(g_text[g_current]);
  ::_exit(code);
}

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT) g_sigints = g_sigints + 1;
  if (g_signal == 0) {
    g_signal = sig;
    if (g_grace > 0) ::alarm(static_cast<unsigned>(g_grace));
    return;
  }
  if (sig == SIGINT && g_sigints >= 3) exit_now("third SIGINT", 128 + SIGINT);
  // Absorbed: the stop already asked for goes on.
  write_all(sig == SIGINT ? "zerotrain: SIGINT again: still stopping (a third SIGINT exits at once without saving)\n"
                          : "zerotrain: stop signal again: absorbed, the stop and its save go on\n");
}

// Only armed by a stop; a stray SIGALRM (mpirun forwards SIGALRM too) before one is ignored.
extern "C" void on_grace_alarm(int) {
  if (g_signal == 0) return;
  exit_now("stop_grace_seconds passed since the stop signal", 128 + g_signal);
}

void set_text(const std::string& s) {
  const int next = 1 - g_current;
  std::snprintf(g_text[next], sizeof g_text[next], "%s\n", s.c_str());
  g_current = next;
}

std::string saved_part() {
  if (g_last_saved.empty()) return "no checkpoint was saved by this run";
  return "the last checkpoint saved is " + g_last_saved + " (step " + std::to_string(g_last_saved_step) +
         "; resume with --resume latest)";
}

}  // namespace

StopSignals::StopSignals(StopOptions options) {
  g_signal = 0;
  g_sigints = 0;
  g_grace = static_cast<std::sig_atomic_t>(options.grace_seconds);
  g_last_saved.clear();
  g_last_saved_step = -1;
  training();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // Each handler runs with the other stop signals blocked, so that two arriving together
  // see a consistent count.
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGUSR1);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGUSR1, &sa, &g_old_usr1);
  if (g_grace > 0) {
    struct sigaction alrm {};
    alrm.sa_handler = on_grace_alarm;
    sigemptyset(&alrm.sa_mask);
    sigaction(SIGALRM, &alrm, &g_old_alrm);
  }
}

StopSignals::~StopSignals() {
  // After a stop the handlers stay until the process ends: the second SIGTERM of a pair
  // may land after the save, while the run is torn down, and must not turn its exit 0
  // into 143 (nor may the grace timeout stop counting).
  if (g_signal != 0) return;
  if (g_grace > 0) ::alarm(0);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  if (g_grace > 0) sigaction(SIGALRM, &g_old_alrm, nullptr);
}

bool StopSignals::requested() const { return g_signal != 0; }
int StopSignals::signal() const { return g_signal; }

void StopSignals::saving(int64_t step) {
  set_text("the checkpoint of step " + std::to_string(step) +
           " was being written and is not complete (a partial checkpoint is never named by latest); " + saved_part());
}

void StopSignals::saved(const std::string& checkpoint, int64_t step) {
  g_last_saved = checkpoint;
  g_last_saved_step = step;
  training();
}

void StopSignals::training() { set_text("the steps after the last checkpoint were not saved; " + saved_part()); }

}  // namespace zt::train
