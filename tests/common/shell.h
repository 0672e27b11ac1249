// Running commands from e2e tests: the zerotrain binary, a shell command's exit code and
// combined output, and the OpenMPI settings for multi-rank runs on the test machine.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace zt::testing {

struct ShellResult {
  int rc;           // exit code; -1 when the command could not run or was killed by a signal
  std::string out;  // stdout and stderr together
};

inline ShellResult sh(const std::string& cmd) {
  ShellResult r{-1, ""};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string zerotrain_binary() { return std::string(ZT_BINARY_DIR) + "/zerotrain"; }

inline bool have_mpirun() { return sh("command -v mpirun").rc == 0; }

// OpenMPI in one container with no network (shared memory only), oversubscribed on a
// small machine, as root on CI (as tests/comm). A prefix for a command line.
inline const std::string kMpirunEnv =
    "env OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none "
    "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none OMPI_ALLOW_RUN_AS_ROOT=1 "
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
    // Each job its own session-directory base: two mpiruns starting at once (ctest -j) race
    // to create /tmp/ompi.<host>.<uid> and one fails orte_init ("File exists").
    "OMPI_MCA_orte_tmpdir_base=$(mktemp -d -t zt-ompi.XXXXXX) "
    // Sanitizer builds: OpenMPI leaks its own start-up allocations (in dlopened components
    // LeakSanitizer cannot even name), which would fail every MPI job; our code's leaks are
    // caught by the single-process tests. Address and UB checks stay on.
    "ASAN_OPTIONS=detect_leaks=0 ";

}  // namespace zt::testing
