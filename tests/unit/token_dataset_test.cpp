// Token shards (zerotrain, llm.c, raw nanoGPT u16) and the batch loader: windows, seeded
// per-epoch order, identical global batches at any world size, exact resume, and
// malformed shards as clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/token_dataset.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::io;

namespace {

// This file's per-test scratch directory: build/test_tmp/tokens_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("tokens_")) {}
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<int32_t> iota_ids(int64_t n, int32_t start, int32_t mod) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (start + static_cast<int32_t>(i)) % mod;
  return v;
}

std::vector<int32_t> read_shard(const std::string& path) {
  auto s = open_token_shard(path);
  std::vector<int32_t> v(static_cast<size_t>(s->size()));
  s->read(0, s->size(), v.data());
  return v;
}

void expect_bad_shard(const std::string& path, const std::vector<std::string>& needles,
                      ErrorKind kind = ErrorKind::BadInput) {
  try {
    open_token_shard(path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// All batches of `steps` global steps, as the concatenation of every rank's micro-batch.
std::vector<std::vector<int32_t>> global_batches(const std::vector<std::string>& shards, int64_t global, int world,
                                                 int64_t T, uint64_t seed, int steps) {
  const int64_t B = global / world;
  std::vector<std::unique_ptr<BatchLoader>> ls;
  for (int r = 0; r < world; ++r) ls.push_back(std::make_unique<BatchLoader>(shards, B, T, seed, r, world));
  std::vector<std::vector<int32_t>> out;
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> batch;
    for (int r = 0; r < world; ++r) {
      ls[static_cast<size_t>(r)]->next(tok, tgt);
      const int32_t* t = tok.data<int32_t>();
      const int32_t* g = tgt.data<int32_t>();
      for (int64_t i = 0; i < B * T; ++i) {
        batch.push_back(t[i]);
        batch.push_back(g[i]);
      }
    }
    out.push_back(std::move(batch));
  }
  return out;
}

}  // namespace

TEST(TokenDataset, ZerotrainShardRoundTripU16AndU32) {
  TempDir dir;
  const auto small = iota_ids(1000, 7, 50257);
  write_token_shard(dir.file("a.bin"), small.data(), 1000, 50257, 50256);
  auto s = open_token_shard(dir.file("a.bin"));
  EXPECT_EQ(s->format(), ShardFormat::Zerotrain);
  EXPECT_EQ(s->size(), 1000);
  EXPECT_EQ(s->vocab_size(), 50257);
  EXPECT_EQ(s->eos_id(), 50256);
  EXPECT_EQ(read_shard(dir.file("a.bin")), small);
  EXPECT_EQ(fs::file_size(dir.file("a.bin")), 64u + 2000u);  // u16 ids
  const std::string bytes = read_all(dir.file("a.bin"));
  EXPECT_EQ(bytes.substr(0, 8), "ZTTOKENS");
  // Llama-3's vocabulary needs u32 ids.
  const auto big = iota_ids(500, 128000, 128256);
  write_token_shard(dir.file("b.bin"), big.data(), 500, 128256, 128001);
  EXPECT_EQ(fs::file_size(dir.file("b.bin")), 64u + 2000u);
  EXPECT_EQ(read_shard(dir.file("b.bin")), big);
  EXPECT_EQ(open_token_shard(dir.file("b.bin"))->at(3), 128003);
  // Out-of-vocabulary ids are refused and no file is left.
  std::vector<int32_t> bad = {1, 2, 70000};
  EXPECT_THROW(write_token_shard(dir.file("c.bin"), bad.data(), 3, 65536, 0), Error);
  EXPECT_FALSE(fs::exists(dir.file("c.bin")));
}

TEST(TokenDataset, LlmcAndRawNanoGptShards) {
  TempDir dir;
  const auto ids = iota_ids(777, 0, 50257);
  write_llmc_shard(dir.file("fineweb_train_000001.bin"), ids.data(), 777);
  // The llm.c layout: 256 int32 header (magic, version, count), then u16 tokens.
  const std::string bytes = read_all(dir.file("fineweb_train_000001.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 2 * 777u);
  int32_t header[3];
  std::memcpy(header, bytes.data(), 12);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 777);
  EXPECT_EQ(open_token_shard(dir.file("fineweb_train_000001.bin"))->format(), ShardFormat::LlmC);
  EXPECT_EQ(read_shard(dir.file("fineweb_train_000001.bin")), ids);
  // nanoGPT: np.array(ids, dtype=np.uint16).tofile("train.bin").
  std::string raw;
  for (int32_t v : ids) {
    raw.push_back(static_cast<char>(v & 0xff));
    raw.push_back(static_cast<char>(v >> 8));
  }
  write_all(dir.file("train.bin"), raw);
  EXPECT_EQ(open_token_shard(dir.file("train.bin"))->format(), ShardFormat::RawU16);
  EXPECT_EQ(read_shard(dir.file("train.bin")), ids);
}

TEST(TokenDataset, MalformedShardsAreClearErrors) {
  TempDir dir;
  const auto ids = iota_ids(100, 0, 1000);
  write_token_shard(dir.file("good.bin"), ids.data(), 100, 1000, 0);
  const std::string good = read_all(dir.file("good.bin"));
  write_llmc_shard(dir.file("llmc.bin"), ids.data(), 100);
  const std::string llmc = read_all(dir.file("llmc.bin"));
  auto bad = [&](const std::string& name, const std::string& bytes) {
    write_all(dir.file(name), bytes);
    return dir.file(name);
  };
  expect_bad_shard(bad("empty.bin", ""), {"empty token shard"});
  expect_bad_shard(bad("cut.bin", good.substr(0, good.size() - 3)), {"truncated"});
  expect_bad_shard(bad("cut_header.bin", good.substr(0, 20)), {"truncated zerotrain shard header"});
  std::string v3 = good;
  v3[8] = 3;  // version 2 is the SFT shard (tests/unit/sft_data_test.cpp)
  expect_bad_shard(bad("v3.bin", v3), {"version 3"}, ErrorKind::Unsupported);
  std::string v2 = good;  // a version 1 body labelled 2: no mask or samples
  v2[8] = 2;
  expect_bad_shard(bad("v2.bin", v2), {"truncated or corrupt"}, ErrorKind::BadInput);
  std::string w3 = good;
  w3[12] = 3;
  expect_bad_shard(bad("w3.bin", w3), {"token width 3"});
  std::string huge = good;
  huge[23] = 0x7f;  // token count ~ 2^62
  expect_bad_shard(bad("huge.bin", huge), {"truncated or corrupt"});
  expect_bad_shard(bad("llmc_cut.bin", llmc.substr(0, llmc.size() - 2)), {"llm.c header says 100 tokens"});
  expect_bad_shard(bad("llmc_hdr.bin", llmc.substr(0, 500)), {"truncated llm.c shard header"});
  std::string lv = llmc;
  lv[4] = 7;
  expect_bad_shard(bad("llmc_v7.bin", lv), {"llm.c shard version 7"}, ErrorKind::Unsupported);
  expect_bad_shard(bad("odd.bin", "abc"), {"odd size"});
  expect_bad_shard(bad("notes.txt", "hello world"), {"not a token shard"});
  expect_bad_shard(dir.file("absent.bin"), {"no such file"});
  expect_bad_shard(dir.path().string(), {"not a regular file"});
}

TEST(TokenDataset, ListShards) {
  TempDir dir;
  const auto ids = iota_ids(10, 0, 100);
  for (const char* n : {"val_000000.bin", "train_000001.bin", "train_000000.bin"})
    write_token_shard(dir.file(n), ids.data(), 10, 100, 0);
  write_all(dir.file("README.md"), "x");
  EXPECT_EQ(list_token_shards(dir.path().string()),
            (std::vector<std::string>{dir.file("train_000000.bin"), dir.file("train_000001.bin"),
                                      dir.file("val_000000.bin")}));
  EXPECT_EQ(list_token_shards(dir.file("train_*.bin")),
            (std::vector<std::string>{dir.file("train_000000.bin"), dir.file("train_000001.bin")}));
  EXPECT_EQ(list_token_shards(dir.file("val_000000.bin")), (std::vector<std::string>{dir.file("val_000000.bin")}));
  EXPECT_THROW(list_token_shards(dir.file("nothing_*.bin")), Error);
  fs::create_directories(dir.file("emptydir"));
  EXPECT_THROW(list_token_shards(dir.file("emptydir")), Error);
}

TEST(TokenDataset, WindowsCoverEveryTargetOncePerEpoch) {
  TempDir dir;
  // Two shards; token value = global position, so windows identify themselves.
  std::vector<int32_t> a(101), b(57);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(1000 + i);
  write_token_shard(dir.file("a.bin"), a.data(), 101, 2000, 0);
  write_token_shard(dir.file("b.bin"), b.data(), 57, 2000, 0);
  const int64_t T = 10;
  BatchLoader loader({dir.file("a.bin"), dir.file("b.bin")}, 1, T, 42);
  EXPECT_EQ(loader.windows_per_epoch(), 10 + 5);  // (101-1)/10 + (57-1)/10
  std::set<std::pair<int64_t, int64_t>> seen;
  OwnedTensor tok({1, T}, DType::I32), tgt({1, T}, DType::I32);
  std::multiset<int32_t> targets;
  for (int i = 0; i < 15; ++i) {
    seen.insert(loader.window(i));
    loader.next(tok, tgt);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(tgt.data<int32_t>()[t], tok.data<int32_t>()[t] + 1);  // targets shifted by one
      targets.insert(tgt.data<int32_t>()[t]);
    }
  }
  EXPECT_EQ(seen.size(), 15u);
  // Every token of shard a from 1..100 and of shard b from 1001..1050 is a target exactly once.
  EXPECT_EQ(targets.size(), 150u);
  for (int32_t v = 1; v <= 100; ++v) EXPECT_EQ(targets.count(v), 1u) << v;
  for (int32_t v = 1001; v <= 1050; ++v) EXPECT_EQ(targets.count(v), 1u) << v;
  EXPECT_EQ(loader.state().epoch, 0u);
  EXPECT_EQ(loader.state().position, 15u);
  // The order is shuffled (not 0..14) and differs between epochs and seeds.
  std::vector<std::pair<int64_t, int64_t>> epoch0;
  for (int i = 0; i < 15; ++i) epoch0.push_back(loader.window(i));
  loader.next(tok, tgt);  // wraps
  EXPECT_EQ(loader.state().epoch, 1u);
  EXPECT_EQ(loader.state().position, 1u);
  std::vector<std::pair<int64_t, int64_t>> epoch1;
  for (int i = 0; i < 15; ++i) epoch1.push_back(loader.window(i));
  EXPECT_NE(epoch0, epoch1);
  std::vector<std::pair<int64_t, int64_t>> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(epoch0, sorted);
  BatchLoader other({dir.file("a.bin"), dir.file("b.bin")}, 1, T, 43);
  std::vector<std::pair<int64_t, int64_t>> seed43;
  for (int i = 0; i < 15; ++i) seed43.push_back(other.window(i));
  EXPECT_NE(epoch0, seed43);
}

TEST(TokenDataset, GlobalBatchIsTheSameAtAnyWorldSize) {
  TempDir dir;
  const auto ids = iota_ids(5000, 3, 30000);
  write_token_shard(dir.file("a.bin"), ids.data(), 5000, 30000, 0);
  const std::vector<std::string> shards = {dir.file("a.bin")};
  const int64_t T = 16, global = 8;
  const int steps = 2 * (5000 - 1) / T / global + 3;  // crosses two epoch boundaries
  const auto w1 = global_batches(shards, global, 1, T, 9, steps);
  EXPECT_EQ(global_batches(shards, global, 2, T, 9, steps), w1);
  EXPECT_EQ(global_batches(shards, global, 4, T, 9, steps), w1);
  EXPECT_EQ(global_batches(shards, global, 8, T, 9, steps), w1);
  EXPECT_NE(global_batches(shards, global, 2, T, 10, steps), w1);
  // Ranks see disjoint windows within a step.
  BatchLoader r0(shards, 4, T, 9, 0, 2), r1(shards, 4, T, 9, 1, 2);
  std::set<std::pair<int64_t, int64_t>> s0, s1;
  for (int w = 0; w < 4; ++w) s0.insert(r0.window(w));
  for (int w = 4; w < 8; ++w) s1.insert(r1.window(w));
  for (const auto& w : s0) EXPECT_EQ(s1.count(w), 0u);
}

TEST(TokenDataset, ResumeSeesExactlyTheSameBatches) {
  TempDir dir;
  const auto ids = iota_ids(3000, 11, 30000);
  write_token_shard(dir.file("a.bin"), ids.data(), 3000, 30000, 0);
  const std::vector<std::string> shards = {dir.file("a.bin")};
  const int64_t B = 3, T = 20;
  BatchLoader full(shards, B, T, 5);
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  std::vector<std::vector<int32_t>> reference;
  LoaderState saved;
  const int steps = 120;  // 49 steps per epoch: crosses epochs
  EXPECT_EQ(full.steps_per_epoch(), (3000 - 1) / T / B);
  for (int s = 0; s < steps; ++s) {
    if (s == 70) saved = full.state();
    full.next(tok, tgt);
    const int32_t* t = tok.data<int32_t>();
    reference.emplace_back(t, t + B * T);
  }
  EXPECT_EQ(saved.epoch, 1u);
  BatchLoader resumed(shards, B, T, 5);
  resumed.restore(saved);
  for (int s = 70; s < steps; ++s) {
    resumed.next(tok, tgt);
    const int32_t* t = tok.data<int32_t>();
    EXPECT_EQ(std::vector<int32_t>(t, t + B * T), reference[static_cast<size_t>(s)]) << "step " << s;
  }
  // A resumed run at another world size (same global batch) continues the same sequence.
  BatchLoader r0(shards, 1, T, 5, 0, 3), r1(shards, 1, T, 5, 1, 3), r2(shards, 1, T, 5, 2, 3);
  for (BatchLoader* l : {&r0, &r1, &r2}) l->restore(saved);
  OwnedTensor one({1, T}, DType::I32), one_t({1, T}, DType::I32);
  for (int s = 70; s < 75; ++s) {
    std::vector<int32_t> got;
    for (BatchLoader* l : {&r0, &r1, &r2}) {
      l->next(one, one_t);
      got.insert(got.end(), one.data<int32_t>(), one.data<int32_t>() + T);
    }
    EXPECT_EQ(got, reference[static_cast<size_t>(s)]) << "step " << s;
  }
  LoaderState past;
  past.position = 1u << 30;
  EXPECT_THROW(resumed.restore(past), Error);
}

TEST(TokenDataset, LoaderErrors) {
  TempDir dir;
  const auto ids = iota_ids(100, 0, 1000);
  write_token_shard(dir.file("a.bin"), ids.data(), 100, 1000, 0);
  try {
    BatchLoader l({dir.file("a.bin")}, 8, 32, 1);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("fewer than one global batch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BatchLoader({dir.file("a.bin")}, 1, 8, 1, 2, 2), Error);  // rank outside the world
  EXPECT_THROW(BatchLoader({}, 1, 8, 1), Error);
  // Ids beyond the model's vocabulary are refused by name, not used as indices.
  BatchLoader l({dir.file("a.bin")}, 2, 8, 1);
  l.set_vocab_size(50);
  OwnedTensor tok({2, 8}, DType::I32), tgt({2, 8}, DType::I32);
  try {
    for (int i = 0; i < 10; ++i) l.next(tok, tgt);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary of 50"), std::string::npos) << e.what();
  }
}
