// The message of the BadInput error (exit code 2) that `f` must throw; a test failure when
// it throws nothing or another kind of error.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace zt::testing {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace zt::testing
