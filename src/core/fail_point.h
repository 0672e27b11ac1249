// Test-only fault injection: ZT_TEST_FAIL_AT=<point> makes the process SIGKILL itself
// when it reaches the named point of a save sequence, so that tests can crash a save at an
// exact moment (not by timing luck) and check what the crash leaves behind.
//
//   ZT_TEST_FAIL_AT=checkpoint.swapped              the first time the point is reached
//   ZT_TEST_FAIL_AT=checkpoint.swapped@global_step3 only when `detail` is global_step3
//
// Points are listed in docs/checkpoints.md (Atomicity). Unset (production): one getenv.
#pragma once

namespace zt {

void fail_point(const char* point, const char* detail = nullptr);

}  // namespace zt
