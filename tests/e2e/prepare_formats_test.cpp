// `zerotrain prepare` and `zerotrain train` on the data files users bring
// (tests/data/datasets, written by pyarrow and datasets: tools/make_data_fixtures.py):
// an Arrow IPC stream, an Arrow IPC file, a save_to_disk folder and (with Apache Arrow in
// the build) Parquet give the same token shards as the equivalent JSON Lines; a missing
// column, compressed Arrow, Parquet without Arrow and a binary file given as text exit 2
// naming the file, with no output left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/parquet_text.h"

namespace fs = std::filesystem;

namespace {

using zt::testing::file_bytes;
using zt::testing::sh;
using zt::testing::ShellResult;

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("prepare_formats_")) {}
};

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/datasets/";
const std::string kGpt2 = std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2";

std::string bin() { return zt::testing::zerotrain_binary(); }

ShellResult prepare(const std::string& input, const std::string& out, const std::string& extra = "") {
  return sh(bin() + " prepare --quiet --tokenizer " + kGpt2 + " --out " + out + " " + extra + " " + input);
}

std::vector<std::string> columnar_inputs() {
  std::vector<std::string> in{"docs.stream.arrow", "docs.file.arrow", "save_to_disk"};
  if (zt::io::parquet_supported()) in.push_back("docs.parquet");
  return in;
}

}  // namespace

TEST(PrepareFormatsCli, ArrowSaveToDiskAndParquetMatchJsonl) {
  ASSERT_EQ(::access(bin().c_str(), X_OK), 0) << "build the zerotrain target first";
  TempDir dir;
  ShellResult r = prepare(kData + "docs.jsonl", dir.file("jsonl"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string want = file_bytes(dir.file("jsonl/train_000000.bin"));
  ASSERT_GT(want.size(), 64u);
  for (const std::string& in : columnar_inputs()) {
    const std::string out = dir.file(in + ".out");
    r = prepare(kData + in, out);
    ASSERT_EQ(r.rc, 0) << in << ": " << r.out;
    EXPECT_NE(r.out.find("prepared 6 documents"), std::string::npos) << in << ": " << r.out;
    EXPECT_EQ(file_bytes(out + "/train_000000.bin"), want) << in;
  }
}

TEST(PrepareFormatsCli, BadColumnarInputExits2NamingTheFile) {
  ASSERT_EQ(::access(bin().c_str(), X_OK), 0) << "build the zerotrain target first";
  TempDir dir;
  const std::string out = dir.file("out");
  ShellResult r = prepare(kData + "save_to_disk", out, "--field body");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("data-00000-of-00002.arrow: no column 'body' (the columns: id int64, text string)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--field NAME"), std::string::npos) << r.out;
  r = prepare(kData + "docs.zstd.arrow", out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("docs.zstd.arrow: its record batches are compressed (zstd)"), std::string::npos) << r.out;
  if (!zt::io::parquet_supported()) {
    r = prepare(kData + "docs.parquet", out);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("docs.parquet: Parquet needs a build with Apache Arrow"), std::string::npos) << r.out;
  }
  // A gzip file named .jsonl and a weights file named .txt are never tokenized.
  fs::copy_file(kData + "docs.jsonl", dir.file("plain.jsonl"));
  ASSERT_EQ(sh("gzip -c " + dir.file("plain.jsonl") + " > " + dir.file("data.jsonl")).rc, 0);
  r = prepare(dir.file("data.jsonl"), out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("data.jsonl: not text: this is a gzip-compressed file"), std::string::npos) << r.out;
  fs::copy_file(std::string(ZT_SOURCE_DIR) + "/tests/data/hf/gpt2/model.safetensors", dir.file("weights.txt"));
  r = prepare(dir.file("weights.txt"), out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("weights.txt: not text: this is a safetensors weights file"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

// data.train naming Arrow data: the tokenizer a preset trains and the shards the run
// prepares equal those from the JSONL (the tokenizer is trained on documents, not on the
// file's bytes), and a binary file there stops the run with exit 2.
TEST(PrepareFormatsCli, TrainReadsArrowAsItsJsonl) {
  ASSERT_EQ(::access(bin().c_str(), X_OK), 0) << "build the zerotrain target first";
  TempDir dir;
  const auto train = [&](const std::string& name, const std::string& data) {
    const std::string yaml = dir.file(name + ".yaml");
    std::ofstream(yaml) << "model: {preset: tiny-gpt2}\ndata:\n  train: ['" << data
                        << "']\n  seq_len: 8\nper_device_train_batch_size: 1\nmax_steps: 1\nsave_interval: 0\n"
                           "eval_interval: 0\noutput_dir: '"
                        << dir.file(name) << "'\n";
    return sh(bin() + " train " + yaml);
  };
  ShellResult r = train("jsonl", kData + "docs.jsonl");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string shard = "/data/train_000000.bin";
  ASSERT_GT(file_bytes(dir.file("jsonl") + shard).size(), 64u);
  for (const std::string& in : {std::string("docs.stream.arrow"), std::string("save_to_disk")}) {
    r = train(in, kData + in);
    ASSERT_EQ(r.rc, 0) << in << ": " << r.out;
    EXPECT_EQ(file_bytes(dir.file(in + "/tokenizer.json")), file_bytes(dir.file("jsonl/tokenizer.json"))) << in;
    EXPECT_EQ(file_bytes(dir.file(in) + shard), file_bytes(dir.file("jsonl") + shard)) << in;
  }
  fs::copy_file(std::string(ZT_SOURCE_DIR) + "/tests/data/hf/gpt2/model.safetensors", dir.file("weights.txt"));
  r = train("binary", dir.file("weights.txt"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("weights.txt: not text"), std::string::npos) << r.out;
}
