// prepare_dataset: text / directory / JSONL inputs -> shards with EOS before each document,
// exact shard cuts, a deterministic train/val split independent of the thread count, and
// malformed input as errors that leave no output behind.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/byte_tokenizer.h"
#include "io/prepare.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::io;

namespace {

// This file's per-test scratch directory: build/test_tmp/prepare_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("prepare_")) {}
};

void write_all(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<int32_t> read_split(const std::string& dir, const std::string& prefix) {
  std::vector<int32_t> all;
  for (const auto& p : list_token_shards(dir + "/" + prefix + "_*.bin")) {
    auto s = open_token_shard(p);
    std::vector<int32_t> v(static_cast<size_t>(s->size()));
    s->read(0, s->size(), v.data());
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// The byte tokenizer with EOS = 0 (bytes 1..255 in our test text never include NUL).
PrepareOptions byte_options(const std::string& out) {
  PrepareOptions o;
  o.output_dir = out;
  o.eos_id = 0;
  o.progress = Progress::Never;
  return o;
}

std::vector<int32_t> with_eos(const std::vector<std::string>& docs) {
  std::vector<int32_t> v;
  for (const auto& d : docs) {
    v.push_back(0);
    const auto ids = byte_encode(d);
    v.insert(v.end(), ids.begin(), ids.end());
  }
  return v;
}

template <class F>
void expect_input_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
  }
}

}  // namespace

TEST(Prepare, TextFilesDirectoriesAndJsonl) {
  TempDir dir;
  write_all(dir.file("in/b.txt"), "second doc");
  write_all(dir.file("in/a.txt"), "first doc");
  write_all(dir.file("in/sub/c.txt"), "third");
  write_all(dir.file("in/.hidden/x.txt"), "skipped");
  write_all(dir.file("in/empty.txt"), "");
  write_all(dir.file("docs.jsonl"), "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"json \\u00e9 two\"}\n");
  PrepareOptions o = byte_options(dir.file("out"));
  o.inputs = {dir.file("in"), dir.file("docs.jsonl")};
  o.shard_size = 16;
  const PrepareSummary s = prepare_dataset(o, *make_byte_tokenizer());
  const std::vector<std::string> docs = {"first doc", "second doc", "third", "json one", "json \xc3\xa9 two"};
  EXPECT_EQ(s.documents, 5);
  EXPECT_EQ(s.train_documents, 5);
  const auto expected = with_eos(docs);
  EXPECT_EQ(s.train_tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(read_split(dir.file("out"), "train"), expected);
  // Shards are cut at exactly shard_size tokens.
  const auto shards = list_token_shards(dir.file("out/train_*.bin"));
  ASSERT_EQ(shards.size(), (expected.size() + 15) / 16);
  for (size_t i = 0; i + 1 < shards.size(); ++i) EXPECT_EQ(open_token_shard(shards[i])->size(), 16);
  EXPECT_EQ(open_token_shard(shards[0])->vocab_size(), 256);
  EXPECT_EQ(open_token_shard(shards[0])->eos_id(), 0);
  EXPECT_EQ(s.shards.size(), shards.size());
  const nlohmann::json m = nlohmann::json::parse(read_all(dir.file("out/dataset.json")));
  EXPECT_EQ(m["train"]["tokens"], s.train_tokens);
  EXPECT_EQ(m["documents"], 5);
  EXPECT_GT(s.bytes, 0);
  // A directory entry for no EOS: the documents concatenate.
  PrepareOptions n = byte_options(dir.file("noeos"));
  n.eos_id = -1;
  n.inputs = {dir.file("in/a.txt"), dir.file("in/b.txt")};
  prepare_dataset(n, *make_byte_tokenizer());
  EXPECT_EQ(read_split(dir.file("noeos"), "train"), byte_encode("first docsecond doc"));
}

TEST(Prepare, ValSplitIsExactAndIndependentOfThreads) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) {
    docs.push_back("document number " + std::to_string(i) + std::string(static_cast<size_t>(i % 17), 'x'));
    jsonl += nlohmann::json{{"content", docs.back()}}.dump() + "\n";
  }
  write_all(dir.file("d.jsonl"), jsonl);
  std::vector<std::string> outputs;
  for (int threads : {1, 4}) {
    omp_set_num_threads(threads);
    PrepareOptions o = byte_options(dir.file("out" + std::to_string(threads)));
    o.inputs = {dir.file("d.jsonl")};
    o.jsonl_field = "content";
    o.val_fraction = 0.1;
    o.shard_size = 1000;
    const PrepareSummary s = prepare_dataset(o, *make_byte_tokenizer());
    EXPECT_EQ(s.val_documents, 20);
    EXPECT_EQ(s.train_documents, 180);
    std::vector<std::string> train, val;
    for (int i = 0; i < 200; ++i) ((i + 1) % 10 == 0 ? val : train).push_back(docs[static_cast<size_t>(i)]);
    EXPECT_EQ(read_split(o.output_dir, "train"), with_eos(train));
    EXPECT_EQ(read_split(o.output_dir, "val"), with_eos(val));
    std::string all;
    for (const auto& p : list_token_shards(o.output_dir)) all += read_all(p);
    outputs.push_back(all);
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(Prepare, RerunReplacesStaleShardsAndKeepsOtherFiles) {
  TempDir dir;
  write_all(dir.file("a.txt"), std::string(100, 'a'));
  PrepareOptions o = byte_options(dir.file("out"));
  o.inputs = {dir.file("a.txt")};
  o.shard_size = 10;
  prepare_dataset(o, *make_byte_tokenizer());
  EXPECT_EQ(list_token_shards(dir.file("out")).size(), 11u);
  write_all(dir.file("out/NOTES.md"), "mine");
  o.shard_size = 1000;
  prepare_dataset(o, *make_byte_tokenizer());
  EXPECT_EQ(list_token_shards(dir.file("out")).size(), 1u);
  EXPECT_EQ(read_all(dir.file("out/NOTES.md")), "mine");
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(Prepare, BadInputLeavesNoOutput) {
  TempDir dir;
  write_all(dir.file("ok.txt"), "fine");
  write_all(dir.file("bad.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"\n");
  write_all(dir.file("nofield.jsonl"), "{\"body\": \"a\", \"id\": 3}\n");
  write_all(dir.file("num.jsonl"), "{\"text\": 5}\n");
  write_all(dir.file("array.jsonl"), "[1, 2]\n");
  write_all(dir.file("empty.txt"), "");
  fs::create_directories(dir.file("emptydir"));
  const std::string out = dir.file("out");
  auto run = [&](std::vector<std::string> inputs, PrepareOptions o) {
    o.inputs = std::move(inputs);
    o.output_dir = out;
    prepare_dataset(o, *make_byte_tokenizer());
  };
  const PrepareOptions b = byte_options(out);
  expect_input_error([&] { run({dir.file("ok.txt"), dir.file("bad.jsonl")}, b); }, {"bad.jsonl:2", "not valid JSON"});
  expect_input_error([&] { run({dir.file("nofield.jsonl")}, b); },
                     {"nofield.jsonl:1", "no field 'text'", "body, id", "--field"});
  expect_input_error([&] { run({dir.file("num.jsonl")}, b); }, {"num.jsonl:1", "field 'text' is a number"});
  expect_input_error([&] { run({dir.file("array.jsonl")}, b); }, {"array.jsonl:1", "JSON object"});
  expect_input_error([&] { run({dir.file("absent.txt")}, b); }, {"absent.txt", "no such input"});
  expect_input_error([&] { run({dir.file("emptydir")}, b); }, {"emptydir", "no files"});
  expect_input_error([&] { run({dir.file("empty.txt")}, b); }, {"no documents"});
  expect_input_error([&] { run({}, b); }, {"no input files"});
  PrepareOptions bad = b;
  bad.val_fraction = 1.0;
  expect_input_error([&] { run({dir.file("ok.txt")}, bad); }, {"--val-fraction"});
  bad = b;
  bad.shard_size = 0;
  expect_input_error([&] { run({dir.file("ok.txt")}, bad); }, {"--shard-size"});
  bad = b;
  bad.eos_id = -2;  // the byte tokenizer has no EOS
  expect_input_error([&] { run({dir.file("ok.txt")}, bad); }, {"no EOS", "--eos"});
  bad = b;
  bad.eos_id = 300;
  expect_input_error([&] { run({dir.file("ok.txt")}, bad); }, {"EOS id 300", "256"});
  // Nothing was written by any failing run: no output, no staging directories.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  EXPECT_FALSE(fs::exists(out));
  for (const auto& n : names) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
}
