// add / add_inplace / scale_inplace / sum_of_squares / all_finite / SumOfSquares on f32,
// bf16 and f16, including mixed-dtype accumulation, large (parallel) sizes and thread-count
// determinism.
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::testing::err;
using zt::testing::make;
using zt::testing::max_rel_error;
using zt::testing::randn;
using zt::testing::to_d;

const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

float round_to(DType dt, float v) {
  float out;
  uint32_t buf = 0;
  zt::convert(&v, DType::F32, &buf, dt, 1);
  zt::convert(&buf, dt, &out, DType::F32, 1);
  return out;
}

TEST(Elementwise, Add) {
  for (DType dt : kFloatTypes) {
    for (int n : {7, 1, 100003}) {
      OwnedTensor a = make(randn(n, 1), {n}, dt), b = make(randn(n, 2), {n}, dt), out({n}, dt);
      zt::ops::add(out, a, b);
      const auto av = a->to_f32_vector(), bv = b->to_f32_vector(), ov = out->to_f32_vector();
      for (int i = 0; i < n; ++i) ASSERT_EQ(ov[i], round_to(dt, av[i] + bv[i])) << zt::dtype_name(dt) << " " << i;
      zt::ops::add(a, a, b);  // out aliases a
      EXPECT_EQ(a->to_f32_vector(), ov);
    }
  }
}

TEST(Elementwise, AddInplaceAllDtypePairs) {
  for (DType da : kFloatTypes) {
    for (DType dx : kFloatTypes) {
      for (int n : {13, 40001}) {
        OwnedTensor acc = make(randn(n, 3), {n}, da), x = make(randn(n, 4), {n}, dx);
        const auto av = acc->to_f32_vector(), xv = x->to_f32_vector();
        zt::ops::add_inplace(acc, x);
        const auto r = acc->to_f32_vector();
        for (int i = 0; i < n; ++i)
          ASSERT_EQ(r[i], round_to(da, av[i] + xv[i])) << zt::dtype_name(da) << "+=" << zt::dtype_name(dx) << " " << i;
      }
    }
  }
}

TEST(Elementwise, ScaleInplace) {
  for (DType dt : kFloatTypes) {
    const int n = 50001;
    OwnedTensor x = make(randn(n, 5), {n}, dt);
    const auto v = x->to_f32_vector();
    zt::ops::scale_inplace(x, 0.37f);
    const auto r = x->to_f32_vector();
    for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], round_to(dt, v[i] * 0.37f)) << zt::dtype_name(dt);
  }
}

TEST(Elementwise, SumOfSquares) {
  for (DType dt : kFloatTypes) {
    for (int n : {0, 1, 7, 65536, 300007}) {
      OwnedTensor x = make(randn(static_cast<size_t>(n), 6, 3.0f), {n}, dt);
      const auto v = x->to_f32_vector();
      long double ref = 0;
      for (float f : v) ref += static_cast<long double>(f) * f;
      double first = -1;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        const double s = zt::ops::sum_of_squares(x);
        EXPECT_NEAR(s, static_cast<double>(ref), 1e-12 * static_cast<double>(ref) + 1e-30) << zt::dtype_name(dt) << n;
        if (first < 0)
          first = s;
        else
          EXPECT_EQ(s, first) << "thread count changed the result";
      }
      omp_set_num_threads(omp_get_num_procs());
    }
  }
}

TEST(Elementwise, AllFinite) {
  const float bad_values[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
  for (DType dt : kFloatTypes) {
    const int n = 200003;
    OwnedTensor x = make(randn(n, 7, 100.0f), {n}, dt);
    EXPECT_TRUE(zt::ops::all_finite(x)) << zt::dtype_name(dt);
    for (float bad : bad_values) {
      for (int pos : {0, 12345, 65536, n - 1}) {
        const float saved = x->get_f32(pos);
        x->set_f32(pos, bad);
        EXPECT_FALSE(zt::ops::all_finite(x)) << zt::dtype_name(dt) << " " << bad << " at " << pos;
        x->set_f32(pos, saved);
      }
    }
    EXPECT_TRUE(zt::ops::all_finite(x));
  }
  // A finite f32 that overflows to inf only when stored as f16 is non-finite in f16.
  OwnedTensor h = make({70000.0f}, {1}, DType::F16);
  EXPECT_FALSE(zt::ops::all_finite(h));
  OwnedTensor f = make({std::numeric_limits<float>::max()}, {1});
  EXPECT_TRUE(zt::ops::all_finite(f));
}

TEST(Elementwise, SumOfSquaresAccumulatorIsTheOrderedHostSum) {
  // Tensors of every dtype, added in order: the accumulator is the host loop bit for bit.
  std::vector<OwnedTensor> xs;
  int seed = 20;
  for (int n : {0, 7, 65536, 300007})
    for (DType dt : kFloatTypes) xs.push_back(make(randn(static_cast<size_t>(n), ++seed, 2.0f), {n}, dt));
  zt::ops::SumOfSquares acc(zt::Device::cpu());
  EXPECT_EQ(acc.value(), 0.0);
  double want = 0.0;
  for (const OwnedTensor& x : xs) {
    acc.add(x);
    want += zt::ops::sum_of_squares(x);
  }
  EXPECT_EQ(acc.value(), want);
  // Non-finite exactly when some element is: f16's largest finite values square to ~4e9,
  // f32's to ~1e77; neither overflows the double sum.
  OwnedTensor big = make({std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}, {2});
  OwnedTensor big16 = make({65504.0f, -65504.0f}, {2}, DType::F16);
  zt::ops::SumOfSquares finite(zt::Device::cpu());
  finite.add(big);
  finite.add(big16);
  EXPECT_TRUE(std::isfinite(finite.value()));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (DType dt : kFloatTypes) {
      OwnedTensor x = make(randn(1000, 9, 1.0f), {1000}, dt);
      x->set_f32(517, bad);
      zt::ops::SumOfSquares s(zt::Device::cpu());
      s.add(big);
      s.add(x);
      EXPECT_FALSE(std::isfinite(s.value())) << zt::dtype_name(dt) << " " << bad;
    }
  }
  OwnedTensor ints({3}, DType::I32);
  EXPECT_THROW(acc.add(ints), zt::Error);
}

TEST(Elementwise, Mismatches) {
  OwnedTensor a({3}, DType::F32), b({4}, DType::F32), i({3}, DType::I32);
  EXPECT_THROW(zt::ops::add_inplace(a, b), zt::Error);
  EXPECT_THROW(zt::ops::scale_inplace(i, 2.0f), zt::Error);
}

}  // namespace
