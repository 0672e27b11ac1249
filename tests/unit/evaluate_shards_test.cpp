// Token-shard documents for `zerotrain eval`: split at each EOS (which opens its
// document), continued across shard boundaries.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/token_dataset.h"
#include "train/evaluate.h"

namespace fs = std::filesystem;

TEST(EvaluateShards, DocumentsStartAtEachSeparatorAcrossShards) {
  const fs::path dir = fs::path(ZT_BINARY_DIR) / "test_tmp" / ("eval_shards_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int32_t E = 0;
  const std::vector<int32_t> a = {E, 5, 6, 7, E, 8, 9};
  const std::vector<int32_t> b = {10, 11, E, 12};  // the second document continues here
  zt::io::write_token_shard((dir / "train_000000.bin").string(), a.data(), static_cast<int64_t>(a.size()), 64, E);
  zt::io::write_token_shard((dir / "train_000001.bin").string(), b.data(), static_cast<int64_t>(b.size()), 64, E);
  const auto docs = zt::train::read_shard_documents(dir.string(), E);
  const std::vector<std::vector<int32_t>> expected = {{E, 5, 6, 7}, {E, 8, 9, 10, 11}, {E, 12}};
  EXPECT_EQ(docs, expected);
  // No separator: one document.
  const auto one = zt::train::read_shard_documents(dir.string(), -1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].size(), a.size() + b.size());
  EXPECT_THROW(zt::train::read_shard_documents((dir / "absent.bin").string(), E), zt::Error);
  fs::remove_all(dir);
}
