// Finite-difference gradient checking for the op tests.
//
// A test writes its op as a function of f32 input tensors that returns a scalar loss
// L = sum(out * w) for a fixed random w; the analytic gradient from the op's backward is
// compared with central differences. To make the check tight the reference runs the
// same formula in double precision: tests pass a `double` version of the forward.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

namespace zt::testing {

// Central difference of f at x (vector of doubles), for each coordinate.
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f(x);
    x[i] = saved - h;
    const double fm = f(x);
    x[i] = saved;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// Max relative error, with an absolute floor so that near-zero entries do not dominate.
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double denom = std::max({std::fabs(a[i]), std::fabs(b[i]), floor});
    worst = std::max(worst, std::fabs(a[i] - b[i]) / denom);
  }
  return worst;
}

// Relative error with an absolute floor of 1% of the largest reference magnitude: f32 sums
// of many terms have absolute errors ~ eps * sum |terms|, which near-zero entries expose.
inline double err(const std::vector<double>& got, const std::vector<double>& ref) {
  double m = 0;
  for (double r : ref) m = std::max(m, std::fabs(r));
  return max_rel_error(got, ref, std::max(1e-3, 1e-2 * m));
}

}  // namespace zt::testing
