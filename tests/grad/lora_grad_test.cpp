// LoRA's forward and backward (model/lora.h) against a double-precision reference and
// central finite differences: dA, dB and the dx contribution, for an adapter covering a
// whole field and for adapters covering row groups of a packed field, with and without
// dropout (the mask taken from the adapter's own stream).
#include <gtest/gtest.h>

#include <vector>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "model/lora.h"
#include "ops/dropout.h"

namespace {
using namespace zt;
using zt::testing::err;
using zt::testing::make;
using zt::testing::numeric_gradient;
using zt::testing::randn;

std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct Group {
  int64_t row_begin, rows;
};

struct Case {
  const char* name;
  std::vector<Group> groups;  // adapters on one field of O rows
  float dropout;
};

constexpr int64_t N = 4, I = 5, O = 7, R = 3;
constexpr float kScaling = 0.7f;
constexpr uint64_t kSeed = 99, kStep = 3;
constexpr int kLayer = 1;

// y[n, o] = sum over adapters g covering o: s * sum_k (sum_i m_g[n, i] x[n, i] A_g[k, i]) B_g[o - b_g, k]
std::vector<double> reference(const std::vector<Group>& groups, const std::vector<std::vector<double>>& masks,
                              const std::vector<double>& x, const std::vector<std::vector<double>>& a,
                              const std::vector<std::vector<double>>& b) {
  std::vector<double> y(static_cast<size_t>(N * O), 0.0);
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < R; ++k) {
        double h = 0;
        for (int64_t i = 0; i < I; ++i) h += masks[g][n * I + i] * x[n * I + i] * a[g][k * I + i];
        for (int64_t o = 0; o < groups[g].rows; ++o)
          y[n * O + groups[g].row_begin + o] += kScaling * h * b[g][o * R + k];
      }
  return y;
}

double dot(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0;
  for (size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
  return s;
}

class LoraGrad : public ::testing::TestWithParam<Case> {};

TEST_P(LoraGrad, ForwardAndFiniteDifferences) {
  const Case& c = GetParam();
  model::LoraOptions options;
  options.r = R;
  options.scaling = kScaling;
  options.dropout = c.dropout;
  model::BlockLora lora;
  lora.options = &options;
  lora.seed = kSeed;
  lora.step = kStep;
  std::vector<OwnedTensor> owned;
  std::vector<std::vector<double>> a_d, b_d, masks;
  uint32_t seed = 10;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    model::LoraTarget t;
    t.field = model::Field::QkvWeight;
    t.module = "m" + std::to_string(g);
    t.row_begin = c.groups[g].row_begin;
    t.rows = c.groups[g].rows;
    t.field_rows = O;
    t.in_features = I;
    const auto a = randn(static_cast<size_t>(R * I), seed++), b = randn(static_cast<size_t>(t.rows * R), seed++);
    owned.push_back(make(a, {R, I}));
    owned.push_back(make(b, {t.rows, R}));
    owned.push_back(make(randn(static_cast<size_t>(R * I), seed++), {R, I}));  // dA starts nonzero (+=)
    owned.push_back(make(randn(static_cast<size_t>(t.rows * R), seed++), {t.rows, R}));
    const size_t k = owned.size();
    lora.adapters.push_back({t, owned[k - 4], owned[k - 3], owned[k - 2], owned[k - 1]});
    a_d.push_back(to_d(a));
    b_d.push_back(to_d(b));
    // The adapter's mask (1/(1-p) where kept), from its own stream.
    OwnedTensor ones = make(std::vector<float>(static_cast<size_t>(N * I), 1.0f), {N, I}), mask({N, I}, DType::F32);
    ops::dropout_forward(mask, ones, c.dropout, model::lora_dropout_rng(kSeed, kStep, kLayer, g));
    masks.push_back(to_d(mask->to_f32_vector()));
  }
  OwnedTensor xd({N * I}, DType::F32), dxd({N * I}, DType::F32), h({N * R}, DType::F32), dh({N * R}, DType::F32);
  lora.scratch = {xd, dxd, h, dh};

  const auto x = randn(static_cast<size_t>(N * I), 1), y0 = randn(static_cast<size_t>(N * O), 2);
  const auto wl = randn(static_cast<size_t>(N * O), 3), dx0 = randn(static_cast<size_t>(N * I), 4);
  OwnedTensor tx = make(x, {N, I}), ty = make(y0, {N, O});
  model::lora_forward(lora, kLayer, model::Field::QkvWeight, tx, ty);
  // The adapters add to the base output.
  std::vector<double> want = reference(c.groups, masks, to_d(x), a_d, b_d);
  for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
  EXPECT_LT(err(to_d(ty->to_f32_vector()), want), 1e-5) << "forward";

  // L = sum(y * wl): dy = wl. dx accumulates onto dx0, dA and dB onto their start values.
  std::vector<std::vector<float>> da0, db0;
  for (const auto& ad : lora.adapters) {
    da0.push_back(ad.da.to_f32_vector());
    db0.push_back(ad.db.to_f32_vector());
  }
  OwnedTensor tdy = make(wl, {N, O}), tdx = make(dx0, {N, I});
  model::lora_backward(lora, kLayer, model::Field::QkvWeight, tx, tdy, tdx);
  const auto wld = to_d(wl);

  auto dx = tdx->to_f32_vector();
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  const double ex = err(to_d(dx), numeric_gradient([&](const std::vector<double>& v) {
                          return dot(reference(c.groups, masks, v, a_d, b_d), wld);
                        }, to_d(x)));
  EXPECT_LT(ex, 1e-5) << "dx";
  for (size_t g = 0; g < c.groups.size(); ++g) {
    auto da = lora.adapters[g].da.to_f32_vector(), db = lora.adapters[g].db.to_f32_vector();
    for (size_t i = 0; i < da.size(); ++i) da[i] -= da0[g][i];
    for (size_t i = 0; i < db.size(); ++i) db[i] -= db0[g][i];
    const double ea = err(to_d(da), numeric_gradient([&](const std::vector<double>& v) {
                            auto a = a_d;
                            a[g] = v;
                            return dot(reference(c.groups, masks, to_d(x), a, b_d), wld);
                          }, a_d[g]));
    const double eb = err(to_d(db), numeric_gradient([&](const std::vector<double>& v) {
                            auto b = b_d;
                            b[g] = v;
                            return dot(reference(c.groups, masks, to_d(x), a_d, b), wld);
                          }, b_d[g]));
    EXPECT_LT(ea, 1e-5) << "dA of adapter " << g;
    EXPECT_LT(eb, 1e-5) << "dB of adapter " << g;
  }
}

INSTANTIATE_TEST_SUITE_P(Adapters, LoraGrad,
                         ::testing::Values(Case{"whole_field", {{0, O}}, 0.0f},
                                           Case{"packed_rows", {{2, 3}, {5, 2}}, 0.0f},
                                           Case{"whole_field_dropout", {{0, O}}, 0.3f},
                                           Case{"packed_rows_dropout", {{0, 2}, {4, 3}}, 0.3f}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
