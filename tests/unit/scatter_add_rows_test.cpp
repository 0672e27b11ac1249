// ops::scatter_add_rows (ops/embedding.h), the unchecked row scatter-add the packed path uses
// for dwpe by position id, on the CPU: dtable += the rows of each id, bit for bit the plain
// reference of the documented order (rows of one id summed in f32 in ascending index, then
// one add into the pre-filled row, rounded once to dtable's dtype) and embedding_backward's
// dwte (f32, bf16, f16 tables; [B, T] and flat ids; repeats; the threaded size); an id
// outside the table is not an error (the ids are trusted) and its rows are dropped; the
// host-side shape and dtype checks still throw.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/embedding.h"

namespace {

using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::testing::make;
using zt::testing::make_ids;
using zt::testing::randn;

// table (f32 values of a dtype-`dt` tensor) plus, per row r, the sum in ascending i of the
// rows i with ids[i] == r (f32), added once and rounded to dt. Ids outside [0, R) are dropped.
std::vector<float> reference(const std::vector<float>& table, const std::vector<float>& rows,
                             const std::vector<int32_t>& ids, int64_t R, int64_t C, DType dt) {
  std::vector<float> out = table;
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> acc;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != r) continue;
      const float* row = rows.data() + static_cast<int64_t>(i) * C;
      if (acc.empty()) {
        acc.assign(row, row + C);
      } else {
        for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += row[c];
      }
    }
    if (acc.empty()) continue;
    for (int64_t c = 0; c < C; ++c) out[static_cast<size_t>(r * C + c)] += acc[static_cast<size_t>(c)];
  }
  return make(out, {R, C}, dt)->to_f32_vector();  // one rounding to dt
}

TEST(EmbeddingScatterAddRows, MatchesReferenceAndEmbeddingBackward) {
  struct Case {
    int64_t B, T, R, C;
    DType table;
  };
  // The last case is above the OpenMP threshold (N * C > 2^15).
  for (const Case k : {Case{2, 5, 7, 3, DType::F32}, Case{3, 4, 6, 9, DType::BF16}, Case{1, 6, 6, 8, DType::F16},
                       Case{4, 128, 128, 96, DType::F32}}) {
    SCOPED_TRACE(std::string(zt::dtype_name(k.table)) + " C " + std::to_string(k.C));
    const int64_t N = k.B * k.T;
    std::mt19937 gen(5);
    std::vector<int32_t> ids(static_cast<size_t>(N));
    for (auto& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(k.R));
    ids.front() = 0;
    ids.back() = static_cast<int32_t>(k.R - 1);  // both ends of the table
    const std::vector<float> init = make(randn(static_cast<size_t>(k.R * k.C), 6), {k.R, k.C}, k.table)
                                        ->to_f32_vector();  // representable in the table's dtype
    const std::vector<float> rv = randn(static_cast<size_t>(N * k.C), 7);
    const OwnedTensor rows = make(rv, {k.B, k.T, k.C});
    const OwnedTensor tid = make_ids(ids, {k.B, k.T});
    const std::vector<float> want = reference(init, rv, ids, k.R, k.C, k.table);

    OwnedTensor dtable = make(init, {k.R, k.C}, k.table);
    zt::ops::scatter_add_rows(dtable, rows, tid);
    EXPECT_EQ(dtable->to_f32_vector(), want);

    OwnedTensor checked = make(init, {k.R, k.C}, k.table);
    zt::ops::embedding_backward(checked, zt::Tensor{}, rows, tid);
    EXPECT_EQ(dtable->to_f32_vector(), checked->to_f32_vector());

    // Flat ids and 2-D rows.
    OwnedTensor flat = make(init, {k.R, k.C}, k.table);
    zt::ops::scatter_add_rows(flat, rows->reshape({N, k.C}), make_ids(ids, {N}));
    EXPECT_EQ(flat->to_f32_vector(), want);
  }
}

// Trusted ids are not checked: a bad one (a caller's bug) is no error, and its rows are
// dropped rather than added outside the table; the valid ids' rows still add up.
TEST(EmbeddingScatterAddRows, OutOfRangeIdsAreDropped) {
  const int64_t R = 4, C = 5;
  const std::vector<float> rv = randn(4 * C, 8);
  const OwnedTensor rows = make(rv, {4, C});
  OwnedTensor dtable = make(std::vector<float>(R * C, 1.0f), {R, C});
  EXPECT_NO_THROW(zt::ops::scatter_add_rows(dtable, rows, make_ids({2, static_cast<int32_t>(R), -1, 2}, {4})));
  const std::vector<float> got = dtable->to_f32_vector();
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const float want = r == 2 ? 1.0f + (rv[c] + rv[3 * C + c]) : 1.0f;
      EXPECT_EQ(got[r * C + c], want) << "row " << r << " channel " << c;
    }
  }
}

TEST(EmbeddingScatterAddRows, HostSideChecksStillThrow) {
  OwnedTensor dtable = make(std::vector<float>(4 * 3, 0.0f), {4, 3});
  const OwnedTensor ids = make_ids({0, 1}, {2});
  const OwnedTensor rows = make(randn(2 * 3, 9), {2, 3});
  EXPECT_NO_THROW(zt::ops::scatter_add_rows(dtable, rows, ids));
  OwnedTensor f32_ids = make({0.0f, 1.0f}, {2});
  EXPECT_THROW(zt::ops::scatter_add_rows(dtable, rows, f32_ids), zt::Error);  // ids not i32
  OwnedTensor short_rows = make(randn(3, 9), {1, 3});
  EXPECT_THROW(zt::ops::scatter_add_rows(dtable, short_rows, ids), zt::Error);  // not one row per id
  OwnedTensor wide_rows = make(randn(2 * 4, 9), {2, 4});
  EXPECT_THROW(zt::ops::scatter_add_rows(dtable, wide_rows, ids), zt::Error);            // C differs
  EXPECT_THROW(zt::ops::scatter_add_rows(dtable->reshape({12}), rows, ids), zt::Error);  // dtable not 2-D
  OwnedTensor bf16_rows = make(randn(2 * 3, 9), {2, 3}, DType::BF16);
  EXPECT_THROW(zt::ops::scatter_add_rows(dtable, bf16_rows, ids), zt::Error);  // CPU rows are f32
  OwnedTensor i32_table({4, 3}, DType::I32);
  EXPECT_THROW(zt::ops::scatter_add_rows(i32_table, rows, ids), zt::Error);  // dtable not floating
}

}  // namespace
