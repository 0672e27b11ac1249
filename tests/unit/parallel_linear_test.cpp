// The parallel linear (parallel/linear.h) on one rank: with no group it is exactly the
// calls it replaces in the block (ops::linear_forward/backward, then the adapters' gemms),
// bit for bit, for every kind; a recipe other than the activations' is refused; the block's
// weight fields map to the kinds of their tensor-parallel split (model/block.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "model/block.h"
#include "model/weights.h"
#include "ops/gemm.h"
#include "ops/linear.h"
#include "parallel/linear.h"

namespace zt {
namespace {

using testing::make;
using testing::randn;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(ParallelLinear, OneRankIsTheOpCallsBitForBit) {
  const int64_t N = 9, I = 12, O = 10, R = 3;
  const OwnedTensor x = make(randn(N * I, 1), {N, I}), w = make(randn(O * I, 2), {O, I}), b = make(randn(O, 3), {O});
  const OwnedTensor a = make(randn(R * I, 4), {R, I}), bb = make(randn(4 * R, 5), {4, R});
  const OwnedTensor dy = make(randn(N * O, 6), {N, O});
  for (parallel::LinearKind kind :
       {parallel::LinearKind::Replicated, parallel::LinearKind::Column, parallel::LinearKind::Row}) {
    SCOPED_TRACE(parallel::linear_kind_name(kind));
    // Reference: the base linear, then one adapter on output columns [3, 7).
    OwnedTensor y_ref({N, O}, DType::F32), h({N, R}, DType::F32), dh({N, R}, DType::F32);
    ops::linear_forward(y_ref, x, w, b);
    ops::gemm(h, x, Transpose::No, a, Transpose::Yes);
    ops::gemm(y_ref->narrow(1, 3, 4), h, Transpose::No, bb, Transpose::Yes, 0.5f, GradWrite::Accumulate);
    OwnedTensor dx_ref({N, I}, DType::F32),
        dw_ref = OwnedTensor::zeros({O, I}, DType::F32), db_ref = OwnedTensor::zeros({O}, DType::F32),
        da_ref = OwnedTensor::zeros({R, I}, DType::F32), dbb_ref = OwnedTensor::zeros({4, R}, DType::F32);
    ops::linear_backward(dx_ref, dw_ref, db_ref, dy, x, w);
    ops::gemm(h, x, Transpose::No, a, Transpose::Yes);
    ops::gemm(dbb_ref, dy->narrow(1, 3, 4), Transpose::Yes, h, Transpose::No, 0.5f, GradWrite::Accumulate);
    ops::gemm(dh, dy->narrow(1, 3, 4), Transpose::No, bb, Transpose::No, 0.5f);
    ops::gemm(da_ref, dh, Transpose::Yes, x, Transpose::No, 1.0f, GradWrite::Accumulate);
    ops::gemm(dx_ref, dh, Transpose::No, a, Transpose::No, 1.0f, GradWrite::Accumulate);

    OwnedTensor y({N, O}, DType::F32), dx({N, I}, DType::F32),
        dw = OwnedTensor::zeros({O, I}, DType::F32), db = OwnedTensor::zeros({O}, DType::F32),
        da = OwnedTensor::zeros({R, I}, DType::F32), dbb = OwnedTensor::zeros({4, R}, DType::F32),
        h2({N * R}, DType::F32), dh2({N * R}, DType::F32);
    parallel::LinearLora lora;
    lora.r = R;
    lora.scaling = 0.5f;
    lora.scratch = {Tensor(), Tensor(), h2, dh2};
    lora.adapters.push_back({a, bb, da, dbb, 3, 4, I, Philox(1, 1), "m"});
    const parallel::Linear l{
        kind, parallel::Group(), w, b, WeightLayout::OutIn, &lora, parallel::Precision::Activations};
    parallel::linear_forward(l, y, x);
    parallel::linear_backward(l, {dw, db}, dx, dy, x);
    EXPECT_TRUE(same_bits(y, y_ref));
    EXPECT_TRUE(same_bits(dx, dx_ref));
    EXPECT_TRUE(same_bits(dw, dw_ref));
    EXPECT_TRUE(same_bits(db, db_ref));
    EXPECT_TRUE(same_bits(da, da_ref));
    EXPECT_TRUE(same_bits(dbb, dbb_ref));
  }
}

TEST(ParallelLinear, HeldBiasRowsAreZeroedAfterTheBackward) {
  const OwnedTensor x = make(randn(12, 1), {3, 4}), w = make(randn(8, 2), {2, 4}), b = make(randn(2, 3), {2});
  const OwnedTensor dy = make(randn(6, 4), {3, 2});
  OwnedTensor dx({3, 4}, DType::F32), dw = OwnedTensor::zeros({2, 4}, DType::F32),
                                      db = OwnedTensor::zeros({2}, DType::F32);
  parallel::LinearLora lora;
  lora.held_grads.push_back(db->narrow(0, 1, 1));
  const parallel::Linear l{parallel::LinearKind::Replicated, parallel::Group(), w, b, WeightLayout::OutIn, &lora,
                           parallel::Precision::Activations};
  parallel::linear_backward(l, {dw, db}, dx, dy, x);
  EXPECT_NE(db.data<float>()[0], 0.0f);
  EXPECT_EQ(db.data<float>()[1], 0.0f);
}

TEST(ParallelLinear, RefusesRecipesOtherThanTheActivations) {
  const OwnedTensor x = make(randn(8, 1), {2, 4}), w = make(randn(12, 2), {3, 4});
  OwnedTensor y({2, 3}, DType::F32);
  parallel::Linear l;
  l.weight = w;
  l.precision = parallel::Precision::Fp8Tensorwise;
  try {
    parallel::linear_forward(l, y, x);
    FAIL() << "an FP8 recipe ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("fp8-tensorwise"), std::string::npos) << e.what();
  }
}

TEST(ParallelLinear, BlockFieldsMapToTheirSplitsKinds) {
  const model::ModelConfig c = model::preset_config("tiny-llama");
  EXPECT_EQ(model::linear_kind(model::tp_split(c, model::Field::QkvWeight)), parallel::LinearKind::Column);
  EXPECT_EQ(model::linear_kind(model::tp_split(c, model::Field::MlpInWeight)), parallel::LinearKind::Column);
  EXPECT_EQ(model::linear_kind(model::tp_split(c, model::Field::AttnOutWeight)), parallel::LinearKind::Row);
  EXPECT_EQ(model::linear_kind(model::tp_split(c, model::Field::MlpOutWeight)), parallel::LinearKind::Row);
  EXPECT_EQ(model::linear_kind(model::TpSplit::None), parallel::LinearKind::Replicated);
}

}  // namespace
}  // namespace zt
