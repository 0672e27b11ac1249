// Every zerotrain executable runs OpenMP with passive waiting unless the user chose
// (src/core/openmp_wait_policy.cpp): libgomp's ICVs as OMP_DISPLAY_ENV prints them at start.
#include <gtest/gtest.h>

#include <string>

#include "common/shell.h"

namespace {

// The GOMP_SPINCOUNT libgomp runs with: the last one printed (a re-executed program prints
// its ICVs twice, the first time with the default it started with).
std::string effective_spin_count(const std::string& env) {
  const auto r = zt::testing::sh("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u ZT_OPENMP_SPIN OMP_DISPLAY_ENV=verbose " +
                                 env + " " + zt::testing::zerotrain_binary() + " --version");
  EXPECT_EQ(r.rc, 0) << r.out;
  const std::string key = "GOMP_SPINCOUNT = '";
  const size_t at = r.out.rfind(key);
  if (at == std::string::npos) return "(not printed: " + r.out + ")";
  return r.out.substr(at + key.size(), r.out.find('\'', at + key.size()) - at - key.size());
}

TEST(OpenMpWaitPolicy, PassiveUnlessTheUserChoseOtherwise) {
  EXPECT_EQ(effective_spin_count(""), "0");  // passive: no spinning
  EXPECT_NE(effective_spin_count("OMP_WAIT_POLICY=active"), "0");
  EXPECT_EQ(effective_spin_count("GOMP_SPINCOUNT=1234"), "1234");
  EXPECT_NE(effective_spin_count("ZT_OPENMP_SPIN=1"), "0");  // libgomp's own default (it spins)
}

}  // namespace
