// Tensor views (reshape, narrow, select, strides), element access, copy_from with dtype
// conversion, OwnedTensor, and the Philox streams (reproducibility, statistics of
// fill_normal / fill_uniform).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;

OwnedTensor iota(Shape shape, DType dt = DType::F32) {
  OwnedTensor t(std::move(shape), dt);
  for (int64_t i = 0; i < t->numel(); ++i) t->set_f32(i, static_cast<float>(i));
  return t;
}

TEST(Tensor, ShapeAndStrides) {
  OwnedTensor t({2, 3, 4}, DType::F32, zt::Device::cpu(), "t");
  EXPECT_EQ(t->numel(), 24);
  EXPECT_EQ(t->dim(), 3);
  EXPECT_EQ(t->size(-1), 4);
  EXPECT_EQ(t->strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t->nbytes(), 96u);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_EQ(t->name(), "t");
  EXPECT_EQ(zt::shape_str({2, 3}), "[2, 3]");
  EXPECT_THROW(t->size(3), zt::Error);
  EXPECT_FALSE(Tensor{}.defined());
  EXPECT_TRUE(t->defined());
}

TEST(Tensor, Reshape) {
  OwnedTensor t = iota({2, 3, 4});
  const Tensor r = t->reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.data(), t->data());
  EXPECT_EQ(r.get_f32(23), 23.0f);
  EXPECT_EQ(t->flatten().shape(), (Shape{24}));
  EXPECT_THROW(t->reshape({5, 5}), zt::Error);
  EXPECT_THROW(t->reshape({-1, -1}), zt::Error);
  // A non-contiguous view cannot be reshaped.
  EXPECT_THROW(t->narrow(2, 1, 2).reshape({12}), zt::Error);
}

TEST(Tensor, NarrowAndSelect) {
  OwnedTensor t = iota({3, 5});
  const Tensor cols = t->narrow(1, 1, 3);  // [3, 3], strides [5, 1]
  EXPECT_EQ(cols.shape(), (Shape{3, 3}));
  EXPECT_EQ(cols.strides(), (Shape{5, 1}));
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.get_f32(0), 1.0f);
  EXPECT_EQ(cols.get_f32(4), 7.0f);  // row 1, col 1 -> 5 + 2
  EXPECT_EQ(cols.to_f32_vector(), (std::vector<float>{1, 2, 3, 6, 7, 8, 11, 12, 13}));
  const Tensor rows = t->narrow(0, 1, 2);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.get_f32(0), 5.0f);
  const Tensor row2 = t->select(2);
  EXPECT_EQ(row2.shape(), (Shape{5}));
  EXPECT_EQ(row2.get_f32(4), 14.0f);
  const Tensor c = cols.select(1);  // row 1 of the narrowed view
  EXPECT_EQ(c.to_f32_vector(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(t->narrow(-1, 4, 1).get_f32(2), 14.0f);
  EXPECT_THROW(t->narrow(1, 3, 3), zt::Error);
  EXPECT_THROW(t->select(3), zt::Error);
  // Writes through a view land in the owner.
  cols.set_f32(8, -1.0f);
  EXPECT_EQ(t->get_f32(13), -1.0f);
  cols.fill_f32(0.5f);
  EXPECT_EQ(t->get_f32(0), 0.0f);
  EXPECT_EQ(t->get_f32(1), 0.5f);
  EXPECT_EQ(t->get_f32(4), 4.0f);
}

TEST(Tensor, TypedAccessAndZero) {
  OwnedTensor t = OwnedTensor::zeros({4}, DType::I32);
  EXPECT_EQ(t.data<int32_t>()[3], 0);
  t.data<int32_t>()[2] = 7;
  EXPECT_EQ(t->get_f32(2), 7.0f);
  EXPECT_THROW(t->data_as<float>(), zt::Error);
  OwnedTensor f = iota({8});
  f->zero();
  EXPECT_EQ(f->to_f32_vector(), std::vector<float>(8, 0.0f));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % 64, 0u);  // 64-byte aligned
}

TEST(Tensor, CopyFromConvertsDtype) {
  OwnedTensor src = iota({2, 3});
  src->set_f32(5, 1.0f / 3.0f);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    OwnedTensor dst({2, 3}, dt);
    dst->copy_from(src);
    const auto v = dst->to_f32_vector();
    EXPECT_EQ(v[4], 4.0f);
    float expect = 1.0f / 3.0f;
    if (dt == DType::BF16) expect = zt::to_f32(zt::to_bf16(expect));
    if (dt == DType::F16) expect = zt::to_f32(zt::to_f16(expect));
    EXPECT_EQ(v[5], expect) << zt::dtype_name(dt);
  }
  // Strided source and destination.
  OwnedTensor big = iota({3, 4}), dst = OwnedTensor::zeros({3, 4}, DType::BF16);
  dst->narrow(1, 1, 2).copy_from(big->narrow(1, 2, 2));
  EXPECT_EQ(dst->to_f32_vector(), (std::vector<float>{0, 2, 3, 0, 0, 6, 7, 0, 0, 10, 11, 0}));
  OwnedTensor wrong({2, 2}, DType::F32);
  EXPECT_THROW(wrong->copy_from(src), zt::Error);
  // To integers: truncation.
  OwnedTensor ints({2, 3}, DType::I64);
  ints->copy_from(src);
  EXPECT_EQ(ints.data<int64_t>()[4], 4);
  EXPECT_EQ(ints.data<int64_t>()[5], 0);
}

TEST(Tensor, OwnedTensorMoves) {
  OwnedTensor a = iota({5});
  void* p = a->data();
  OwnedTensor b = std::move(a);
  EXPECT_EQ(b->data(), p);
  EXPECT_EQ(b->get_f32(4), 4.0f);
  const Tensor& view = b;
  EXPECT_EQ(view.numel(), 5);
}

TEST(Philox, Reproducible) {
  const zt::Philox a(123, 4), b(123, 4), c(124, 4), d(123, 5);
  for (uint64_t i : {0ull, 1ull, 7ull, 1000001ull, (1ull << 40) + 3}) {
    EXPECT_EQ(a.uniform(i), b.uniform(i));
    EXPECT_EQ(a.normal(i), b.normal(i));
    EXPECT_EQ(a.block(i), b.block(i));
  }
  int diff_seed = 0, diff_stream = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    diff_seed += a.uniform(i) != c.uniform(i);
    diff_stream += a.uniform(i) != d.uniform(i);
    EXPECT_GE(a.uniform(i), 0.0f);
    EXPECT_LT(a.uniform(i), 1.0f);
  }
  EXPECT_GT(diff_seed, 95);
  EXPECT_GT(diff_stream, 95);
  // uniform(i) is word i%4 of block i/4.
  EXPECT_EQ(a.uniform(6), zt::uniform_from_bits(a.block(1)[2]));
  EXPECT_EQ(zt::hash_name("h.0.attn"), zt::hash_name("h.0.attn"));
  EXPECT_NE(zt::hash_name("h.0.attn"), zt::hash_name("h.1.attn"));
}

TEST(Philox, Known4x32Vector) {
  // Random123's known-answer test for philox4x32-10: counter = key = 0.
  uint32_t c[4] = {0, 0, 0, 0};
  zt::philox4x32_10(c, zt::PhiloxKey{0, 0});
  EXPECT_EQ(c[0], 0x6627e8d5u);
  EXPECT_EQ(c[1], 0xe169c58du);
  EXPECT_EQ(c[2], 0xbc57ac4cu);
  EXPECT_EQ(c[3], 0x9b00dbd8u);
  // counter = key = all ones.
  uint32_t d[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  zt::philox4x32_10(d, zt::PhiloxKey{0xffffffffu, 0xffffffffu});
  EXPECT_EQ(d[0], 0x408f276du);
  EXPECT_EQ(d[1], 0x41c83b0eu);
  EXPECT_EQ(d[2], 0xa20bc7c6u);
  EXPECT_EQ(d[3], 0x6d5451fdu);
}

TEST(Philox, FillNormalStatistics) {
  const int64_t n = 1 << 20;
  OwnedTensor t({n}, DType::F32);
  zt::fill_normal(t, zt::Philox(7, zt::hash_name("w")), 0.5f, 2.0f);
  const auto v = t->to_f32_vector();
  double s = 0, s2 = 0, s4 = 0;
  int64_t within1 = 0;
  for (float x : v) {
    const double z = (x - 0.5) / 2.0;
    s += z;
    s2 += z * z;
    s4 += z * z * z * z;
    within1 += std::fabs(z) < 1.0;
    ASSERT_TRUE(std::isfinite(x));
  }
  const double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
  EXPECT_NEAR(kurt, 3.0, 5.0 * std::sqrt(96.0 / n));
  EXPECT_NEAR(static_cast<double>(within1) / n, 0.682689, 0.003);
  // Same values for any thread count, and in bf16 the rounded f32 values.
  omp_set_num_threads(1);
  OwnedTensor t1({n}, DType::F32), tb({n}, DType::BF16);
  zt::fill_normal(t1, zt::Philox(7, zt::hash_name("w")), 0.5f, 2.0f);
  zt::fill_normal(tb, zt::Philox(7, zt::hash_name("w")), 0.5f, 2.0f);
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(t1->to_f32_vector(), v);
  const auto vb = tb->to_f32_vector();
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(vb[i], zt::to_f32(zt::to_bf16(v[i])));
}

TEST(Philox, FillUniformStatistics) {
  const int64_t n = 1 << 20;
  OwnedTensor t({n}, DType::F32);
  zt::fill_uniform(t, zt::Philox(9, 1), -2.0f, 6.0f);
  const auto v = t->to_f32_vector();
  double s = 0, s2 = 0;
  for (float x : v) {
    ASSERT_GE(x, -2.0f);
    ASSERT_LT(x, 6.0f);
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 2.0, 5.0 * std::sqrt(64.0 / 12.0 / n));
  EXPECT_NEAR(var, 64.0 / 12.0, 0.05);
}

}  // namespace
