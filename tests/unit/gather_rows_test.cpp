// ops::gather_rows (ops/embedding.h), the unchecked row gather the packed path uses for its
// position ids, on the CPU: rows equal a plain indexing reference and embedding_forward's
// rows bit for bit (f32, bf16, f16 tables; any ids shape; the threaded size); an id outside
// the table is not an error (the ids are trusted) and leaves its row untouched; the
// host-side shape and dtype checks still throw.
#include <gtest/gtest.h>

#include <random>
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

// out[i] = table[ids[i]] from the table's values as f32.
std::vector<float> reference(const std::vector<float>& table, const std::vector<int32_t>& ids, int64_t C) {
  std::vector<float> out;
  for (int32_t id : ids) out.insert(out.end(), table.begin() + id * C, table.begin() + (id + 1) * C);
  return out;
}

TEST(EmbeddingGatherRows, MatchesIndexingAndEmbeddingForward) {
  struct Case {
    int64_t B, T, R, C;
    DType table;
  };
  // The last case is above the OpenMP threshold (N * C > 2^15).
  for (const Case k : {Case{2, 5, 7, 3, DType::F32}, Case{3, 4, 6, 9, DType::BF16}, Case{1, 6, 6, 8, DType::F16},
                       Case{4, 128, 128, 96, DType::F32}}) {
    SCOPED_TRACE(std::string(zt::dtype_name(k.table)) + " C " + std::to_string(k.C));
    std::mt19937 gen(3);
    std::vector<int32_t> ids(static_cast<size_t>(k.B * k.T));
    for (auto& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(k.R));
    ids.front() = 0;
    ids.back() = static_cast<int32_t>(k.R - 1);  // both ends of the table
    const OwnedTensor table = make(randn(static_cast<size_t>(k.R * k.C), 1), {k.R, k.C}, k.table);
    const OwnedTensor tid = make_ids(ids, {k.B, k.T});
    OwnedTensor out({k.B, k.T, k.C}, DType::F32);
    zt::ops::gather_rows(out, table, tid);
    EXPECT_EQ(out->to_f32_vector(), reference(table->to_f32_vector(), ids, k.C));

    OwnedTensor looked_up({k.B, k.T, k.C}, DType::F32);
    zt::ops::embedding_forward(looked_up, tid, table, zt::Tensor{});
    EXPECT_EQ(out->to_f32_vector(), looked_up->to_f32_vector());

    // Flat ids and a 2-D out (the per-token rope table's layout).
    OwnedTensor flat_out({k.B * k.T, k.C}, DType::F32);
    zt::ops::gather_rows(flat_out, table, make_ids(ids, {k.B * k.T}));
    EXPECT_EQ(flat_out->to_f32_vector(), out->to_f32_vector());
  }
}

// Trusted ids are not checked: a bad one (a caller's bug) is no error, and its row is left
// as it was rather than read from outside the table.
TEST(EmbeddingGatherRows, OutOfRangeIdLeavesItsRowUnwritten) {
  const int64_t R = 4, C = 5;
  const std::vector<float> tv = randn(R * C, 2);
  const OwnedTensor table = make(tv, {R, C});
  OwnedTensor out = make(std::vector<float>(3 * C, -7.0f), {3, C});
  EXPECT_NO_THROW(zt::ops::gather_rows(out, table, make_ids({2, R, -1}, {3})));
  const std::vector<float> got = out->to_f32_vector();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(got[c], tv[2 * C + c]);
    EXPECT_EQ(got[C + c], -7.0f);
    EXPECT_EQ(got[2 * C + c], -7.0f);
  }
}

TEST(EmbeddingGatherRows, HostSideChecksStillThrow) {
  const OwnedTensor table = make(randn(4 * 3, 3), {4, 3});
  const OwnedTensor ids = make_ids({0, 1}, {2});
  OwnedTensor out({2, 3}, DType::F32);
  EXPECT_NO_THROW(zt::ops::gather_rows(out, table, ids));
  OwnedTensor f32_ids = make({0.0f, 1.0f}, {2});
  EXPECT_THROW(zt::ops::gather_rows(out, table, f32_ids), zt::Error);  // ids not i32
  OwnedTensor short_out({1, 3}, DType::F32);
  EXPECT_THROW(zt::ops::gather_rows(short_out, table, ids), zt::Error);  // not one row per id
  OwnedTensor wide_out({2, 4}, DType::F32);
  EXPECT_THROW(zt::ops::gather_rows(wide_out, table, ids), zt::Error);            // C differs
  EXPECT_THROW(zt::ops::gather_rows(out, table->reshape({12}), ids), zt::Error);  // table not 2-D
  OwnedTensor bf16_out({2, 3}, DType::BF16);
  EXPECT_THROW(zt::ops::gather_rows(bf16_out, table, ids), zt::Error);  // CPU outputs are f32
}

}  // namespace
