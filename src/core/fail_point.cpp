#include "core/fail_point.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace zt {

void fail_point(const char* point, const char* detail) {
  const char* want = std::getenv("ZT_TEST_FAIL_AT");
  if (!want || !*want) return;
  const std::string spec(want), name(point);
  const bool hit = spec == name || (detail && spec == name + "@" + detail);
  if (!hit) return;
  std::fprintf(stderr, "zerotrain: ZT_TEST_FAIL_AT: killing the process at %s%s%s\n", point, detail ? "@" : "",
               detail ? detail : "");
  std::fflush(stderr);
  std::raise(SIGKILL);  // as a crash would: no destructors, no cleanup
}

}  // namespace zt
