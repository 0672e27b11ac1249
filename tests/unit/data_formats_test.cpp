// Data files users bring (io/data_format.h, io/document_source.h): Arrow IPC streams and
// files, datasets' save_to_disk folders and Parquet, written by pyarrow and datasets
// themselves (tests/data/datasets, tools/make_data_fixtures.py), give the documents of the
// equivalent JSON Lines; a missing or non-string column, compressed bodies, Parquet
// without Apache Arrow and binary files given as text are BadInput naming the file; a
// corrupt Arrow file is an error, never a read out of bounds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/input_error.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "io/arrow_ipc.h"
#include "io/data_format.h"
#include "io/document_source.h"
#include "io/parquet_text.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::io;
using zt::testing::input_error_of;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("data_formats_")) {}
};

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/datasets/";

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
std::vector<std::string> docs_of(const std::string& path) { return read_documents({path}, DocumentOptions{}); }
void expect_has(const std::string& message, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(message.find(n), std::string::npos) << "no '" << n << "' in: " << message;
}

}  // namespace

TEST(DataFormats, DetectedFromContent) {
  EXPECT_EQ(detect_data_format(kData + "docs.jsonl"), DataFormat::Jsonl);
  EXPECT_EQ(detect_data_format(kData + "docs.stream.arrow"), DataFormat::ArrowStream);
  EXPECT_EQ(detect_data_format(kData + "docs.file.arrow"), DataFormat::ArrowFile);
  EXPECT_EQ(detect_data_format(kData + "save_to_disk/data-00000-of-00002.arrow"), DataFormat::ArrowStream);
  EXPECT_EQ(detect_data_format(kData + "docs.parquet"), DataFormat::Parquet);
  TempDir dir;
  // The name does not decide: an Arrow stream called .txt is Arrow.
  fs::copy_file(kData + "docs.stream.arrow", dir.file("renamed.txt"));
  EXPECT_EQ(detect_data_format(dir.file("renamed.txt")), DataFormat::ArrowStream);
  // Text that starts with a magic's letters is text; so is UTF-8 cut by the 64 KiB sample.
  write_bytes(dir.file("par.txt"), "PAR1 is the first paragraph.\n");
  EXPECT_EQ(detect_data_format(dir.file("par.txt")), DataFormat::Text);
  std::string long_text(64 * 1024 - 1, 'a');
  long_text += "\xc3\xa9 and more";
  write_bytes(dir.file("long.txt"), long_text);
  EXPECT_EQ(detect_data_format(dir.file("long.txt")), DataFormat::Text);
  write_bytes(dir.file("empty.txt"), "");
  EXPECT_EQ(detect_data_format(dir.file("empty.txt")), DataFormat::Text);
}

TEST(DataFormats, ArrowStreamFileAndSaveToDiskGiveTheJsonlDocuments) {
  const std::vector<std::string> want = docs_of(kData + "docs.jsonl");
  ASSERT_EQ(want.size(), 6u);
  // The stream's text column follows a list and a struct column (their buffers skipped).
  EXPECT_EQ(docs_of(kData + "docs.stream.arrow"), want);
  // The file format, large_string, with a null row (skipped).
  EXPECT_EQ(docs_of(kData + "docs.file.arrow"), want);
  EXPECT_EQ(docs_of(kData + "save_to_disk"), want);
  ArrowTextColumn col(kData + "docs.file.arrow", "text");
  std::string_view v;
  int n = 0;
  while (col.next(v)) ++n;
  EXPECT_EQ(n, 6);
  EXPECT_EQ(col.nulls_skipped(), 1);
  EXPECT_EQ(col.bytes_done(), static_cast<int64_t>(fs::file_size(kData + "docs.file.arrow")));
}

TEST(DataFormats, SaveToDiskFollowsStateJsonInsideDirectories) {
  TempDir dir;
  const fs::path ds = dir.path() / "corpus" / "ds";
  fs::create_directories(ds);
  for (const char* f : {"data-00000-of-00002.arrow", "data-00001-of-00002.arrow", "dataset_info.json"})
    fs::copy_file(kData + "save_to_disk/" + f, ds / f);
  // The shards listed last-first; a cache file of .map() beside them is not data.
  std::ofstream(ds / "state.json") << R"({"_data_files": [{"filename": "data-00001-of-00002.arrow"},
                                          {"filename": "data-00000-of-00002.arrow"}], "_split": null})";
  fs::copy_file(kData + "docs.stream.arrow", ds / "cache-0123.arrow");
  std::ofstream(dir.path() / "corpus" / "a.txt") << "first";
  const std::vector<std::string> one = docs_of((ds / "data-00000-of-00002.arrow").string());
  const std::vector<std::string> two = docs_of((ds / "data-00001-of-00002.arrow").string());
  std::vector<std::string> want{"first"};
  want.insert(want.end(), two.begin(), two.end());
  want.insert(want.end(), one.begin(), one.end());
  EXPECT_EQ(docs_of((dir.path() / "corpus").string()), want);
  EXPECT_EQ(list_document_files({ds.string()}),
            (std::vector<std::string>{(ds / "data-00001-of-00002.arrow").string(),
                                      (ds / "data-00000-of-00002.arrow").string()}));
  // state.json naming a missing file, or a path outside the folder.
  std::ofstream(ds / "state.json") << R"({"_data_files": [{"filename": "data-00009-of-00010.arrow"}]})";
  expect_has(input_error_of([&] { list_document_files({ds.string()}); }), {"state.json", "data-00009-of-00010.arrow"});
  std::ofstream(ds / "state.json") << R"({"_data_files": [{"filename": "../a.txt"}]})";
  expect_has(input_error_of([&] { list_document_files({ds.string()}); }), {"state.json", "not a file name"});
}

TEST(DataFormats, DatasetDictNamesItsSplits) {
  TempDir dir;
  fs::create_directories(dir.path() / "dd" / "train");
  std::ofstream(dir.path() / "dd" / "dataset_dict.json") << R"({"splits": ["train", "test"]})";
  const std::string dd = (dir.path() / "dd").string();
  expect_has(input_error_of([&] { list_document_files({dd}); }), {dd, "DatasetDict", "train, test", dd + "/train"});
  // Also when met inside a directory given as data.
  expect_has(input_error_of([&] { list_document_files({dir.path().string()}); }), {"DatasetDict"});
}

TEST(DataFormats, MissingOrNonStringColumnListsTheColumns) {
  for (const char* f : {"docs.stream.arrow", "docs.file.arrow", "save_to_disk"}) {
    const std::string path = kData + f;
    const std::string msg =
        input_error_of([&] { read_documents({path}, DocumentOptions{"body", "--field NAME"}); });
    expect_has(msg, {f, "no column 'body'", "id int64", "text ", "--field NAME"});
  }
  expect_has(input_error_of([&] { read_documents({kData + "docs.stream.arrow"}, DocumentOptions{"meta", "X"}); }),
             {"docs.stream.arrow", "column 'meta' is struct", "not a string"});
  expect_has(input_error_of([&] { read_documents({kData + "docs.stream.arrow"}, DocumentOptions{"id", "X"}); }),
             {"column 'id' is int64"});
}

TEST(DataFormats, CompressedArrowIsRefusedWithTheFix) {
  expect_has(input_error_of([&] { docs_of(kData + "docs.zstd.arrow"); }),
             {"docs.zstd.arrow", "compressed (zstd)", "pa.ipc.open_stream", "new_stream"});
}

TEST(DataFormats, ParquetReadsOrSaysHowToGetIt) {
  if (parquet_supported()) {
    EXPECT_EQ(docs_of(kData + "docs.parquet"), docs_of(kData + "docs.jsonl"));
    expect_has(input_error_of([&] { read_documents({kData + "docs.parquet"}, DocumentOptions{"body", "--field NAME"}); }),
               {"docs.parquet", "no column 'body'", "--field NAME"});
  } else {
    expect_has(input_error_of([&] { docs_of(kData + "docs.parquet"); }),
               {"docs.parquet", "Parquet needs a build with Apache Arrow", "ZT_WITH_PARQUET", "pyarrow.parquet",
                "docs.parquet.jsonl"});
  }
}

TEST(DataFormats, BinaryGivenAsTextIsRefused) {
  TempDir dir;
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  };
  std::string safetensors(8, '\0');
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  safetensors[0] = static_cast<char>(header.size());
  safetensors += header + std::string(4, '\0');
  const std::vector<Case> cases = {
      {"data.jsonl", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8), "gzip"},
      {"data.txt", std::string("\x28\xb5\x2f\xfd\x00\x00", 6), "zstd"},
      {"model.txt", safetensors, "safetensors"},
      {"shard.txt", std::string("ZTTOKENS\x01\x00\x00\x00", 12), "token shard"},
      {"nul.txt", std::string("text\0with a NUL", 15), "NUL byte at offset 4"},
      {"latin1.txt", "caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 3"},
      {"surrogate.txt", "a\xed\xa0\x80", "not UTF-8"},
      {"utf16.txt", std::string("\xff\xfeh\0i\0", 6), "UTF-16"},
      {"cut.parquet", std::string("PAR1\0\0\0\0\0\0\0\0", 12), "truncated Parquet"},
      {"cut.arrow", std::string("ARROW1\0\0\0\0\0\0", 12), "truncated Arrow"},
  };
  for (const Case& c : cases) {
    write_bytes(dir.file(c.name), c.bytes);
    const std::string path = dir.file(c.name);
    expect_has(input_error_of([&] { docs_of(path); }), {path, c.says});
  }
}

// Every truncation and every single-byte change of an Arrow stream and file reads or
// throws zt::Error; nothing reads past the file (the sanitizer build checks that).
TEST(DataFormats, CorruptArrowIsAnErrorNeverACrash) {
  TempDir dir;
  for (const char* f : {"docs.stream.arrow", "docs.file.arrow"}) {
    const std::string good = bytes_of(kData + f);
    const std::string path = dir.file(f);
    const auto read_all = [&] {
      try {
        ArrowTextColumn col(path, "text");
        std::string_view v;
        while (col.next(v)) {
        }
      } catch (const Error&) {
      }
    };
    for (size_t n = 0; n < good.size(); n += 3) {
      write_bytes(path, good.substr(0, n));
      read_all();
    }
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
      write_bytes(path, bad);
      read_all();
    }
  }
}
