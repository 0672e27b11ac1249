#include "core/fail_point.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "core/env_vars.h"
#include "core/error.h"

namespace zt {
namespace {

bool first_attempt() {
  const char* restarts = env_value(EnvVar::RestartCount);
  return restarts == nullptr || std::string(restarts) == "0";
}

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

const char* point_name(TrainPoint point) {
  switch (point) {
    case TrainPoint::StepDone:
      return "train.step_done";
    case TrainPoint::BeforeMicroBatch:
      return "train.before_micro_batch";
    case TrainPoint::Save:
      return "train.save";
    case TrainPoint::SampleToken:
      return "train.sample_token";
  }
  return "train.unknown";
}

}  // namespace

void fail_point(const char* point, const char* detail) {
  const char* want = env_value(EnvVar::TestFailAt);
  if (!want || !*want) return;
  const std::string spec(want), name(point);
  const bool hit = spec == name || (detail && spec == name + "@" + detail);
  if (!hit || !first_attempt()) return;
  std::fprintf(stderr, "zerotrain: ZT_TEST_FAIL_AT: killing the process at %s%s%s\n", point, detail ? "@" : "",
               detail ? detail : "");
  std::fflush(stderr);
  std::raise(SIGKILL);  // as a crash would: no destructors, no cleanup
}

bool nan_gradients_at(int64_t step) {
  const char* at = env_value(EnvVar::TestNanAtStep);
  if (at == nullptr || *at == '\0' || !first_attempt()) return false;
  char* end = nullptr;
  const long long from = std::strtoll(at, &end, 10);
  return end && *end == '+' ? step >= from : step == from;  // "S+": every step from S on
}

bool simulated(Simulated condition) {
  switch (condition) {
    case Simulated::NoRenameExchange:
      return env_equals(EnvVar::TestNoRenameExchange, "1");
    case Simulated::CorruptBenchResult:
      return env_value(EnvVar::TestBenchCorrupt) != nullptr;
  }
  return false;
}

std::optional<uint64_t> simulated_host_memory() {
  const char* v = env_value(EnvVar::TestHostMemoryBytes);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
}

std::optional<uint64_t> simulated_drive_free() {
  const char* v = env_value(EnvVar::TestDriveFreeBytes);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
}

FaultInjector::FaultInjector(int rank) : rank_(rank) {
  const char* spec = env_value(EnvVar::TestSignals);
  const char* only = env_value(EnvVar::TestSignalsRank);
  if (only && std::atoi(only) != rank) return;
  if (const char* stall = env_value(EnvVar::TestStallSaveS)) stall_seconds_ = std::atoll(stall);
  if (!spec) return;
  const std::string s = spec;
  for (const std::string& item : split(s, ',')) {
    const size_t at = item.find('@'), colon = item.find(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at)
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': '", item, "' is not POINT@STEP:SIG[+SIG]");
    SignalDrill d;
    const std::string where = item.substr(0, at), when = item.substr(at + 1, colon - at - 1);
    if (where == "step") {
      d.point = TrainPoint::StepDone;
    } else if (where == "micro") {
      d.point = TrainPoint::BeforeMicroBatch;
    } else if (where == "save") {
      d.point = TrainPoint::Save;
    } else if (where == "sample") {
      d.point = TrainPoint::SampleToken;
    } else {
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': unknown point '", where, "' (step, micro, save or sample)");
    }
    long long step = 0, micro = 0;
    const int n = std::sscanf(when.c_str(), "%lld.%lld", &step, &micro);
    if (n < 1 || (d.point == TrainPoint::BeforeMicroBatch && n != 2))
      ZT_THROW_INPUT("ZT_TEST_SIGNALS='", s, "': bad step '", when, "' (micro@S.M, else @S)");
    d.step = step;
    d.micro = micro;
    for (const std::string& sig : split(item.substr(colon + 1), '+')) d.signals.push_back(parse_signal(sig, s));
    signals_.push_back(std::move(d));
  }
}

void FaultInjector::at(TrainPoint point, int64_t step, int64_t micro) const {
  if (!first_attempt()) return;
  std::string detail =
      "rank" + std::to_string(rank_) + (point == TrainPoint::SampleToken ? ".token" : ".step") + std::to_string(step);
  if (point == TrainPoint::BeforeMicroBatch) detail += ".micro" + std::to_string(micro);
  fail_point(point_name(point), detail.c_str());
  for (const SignalDrill& d : signals_) {
    if (d.point != point || d.step != step || (point == TrainPoint::BeforeMicroBatch && d.micro != micro)) continue;
    // raise() runs the handler before it returns: the signal has been seen when the
    // trainer goes on, wherever it is.
    for (int sig : d.signals) std::raise(sig);
  }
  if (point == TrainPoint::Save && stall_seconds_ > 0)
    std::this_thread::sleep_for(std::chrono::seconds(stall_seconds_));
}

}  // namespace zt
