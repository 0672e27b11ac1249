#include "train/signal_test_hook.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.h"

namespace zt::train {
namespace {

int parse_signal(const std::string& name, const std::string& spec) {
  if (name == "INT") return SIGINT;
  if (name == "TERM") return SIGTERM;
  if (name == "USR1") return SIGUSR1;
  ZT_THROW_INPUT("ZT_TEST_SIGNALS='", spec, "': unknown signal '", name, "' (use INT, TERM or USR1)");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

}  // namespace

SignalTestHook::SignalTestHook(int rank) {
  const char* spec = std::getenv("ZT_TEST_SIGNALS");
  const char* only = std::getenv("ZT_TEST_SIGNALS_RANK");
  if (only && std::atoi(only) != rank) return;
  if (const char* stall = std::getenv("ZT_TEST_STALL_SAVE_S")) stall_seconds_ = std::atoll(stall);
  if (!spec) return;
  const std::string s = spec;
  for (const std::string& item : split(s, ',')) {
    const size_t at = item.find('@'), colon = item.find(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at)
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': '", item, "' is not POINT@STEP:SIG[+SIG]");
    Entry e;
    const std::string where = item.substr(0, at), when = item.substr(at + 1, colon - at - 1);
    if (where == "step") {
      e.point = SignalPoint::AfterStep;
    } else if (where == "micro") {
      e.point = SignalPoint::BeforeMicroBatch;
    } else if (where == "save") {
      e.point = SignalPoint::Save;
    } else {
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': unknown point '", where, "' (step, micro or save)");
    }
    long long step = 0, micro = 0;
    const int n = std::sscanf(when.c_str(), "%lld.%lld", &step, &micro);
    if (n < 1 || (e.point == SignalPoint::BeforeMicroBatch && n != 2))
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': bad step '", when, "' (micro@S.M, else @S)");
    e.step = step;
    e.micro = micro;
    for (const std::string& sig : split(item.substr(colon + 1), '+')) e.signals.push_back(parse_signal(sig, s));
    entries_.push_back(std::move(e));
  }
}

void SignalTestHook::at(SignalPoint point, int64_t step, int64_t micro) const {
  for (const Entry& e : entries_) {
    if (e.point != point || e.step != step || (point == SignalPoint::BeforeMicroBatch && e.micro != micro)) continue;
    // raise() runs the handler before it returns: the signal has been seen when the
    // trainer goes on, wherever it is.
    for (int sig : e.signals) std::raise(sig);
  }
}

void SignalTestHook::before_save() const {
  if (stall_seconds_ > 0) std::this_thread::sleep_for(std::chrono::seconds(stall_seconds_));
}

}  // namespace zt::train
