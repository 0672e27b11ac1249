// safetensors reader/writer and the HF weights mapping: round trips, the exact file layout,
// and malformed files (every one a BadInput error, never a crash).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "model/hf_weights.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/registry.h"

namespace fs = std::filesystem;
using namespace zt;
using zt::io::SafetensorsReader;

namespace {

// This file's per-test scratch directory: build/test_tmp/safetensors_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("safetensors_")) {}
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
// A file with the given header text and `data_bytes` zero bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Expects opening `path` to fail with BadInput whose message names the file and `needle`.
void expect_bad_input(const std::string& path, const std::string& needle) {
  try {
    SafetensorsReader r(path);
    ADD_FAILURE() << "expected BadInput for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message '" << msg << "' lacks '" << needle << "'";
  }
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypesAndLayout) {
  TempDir dir;
  OwnedTensor f32({3, 5}, DType::F32), bf({7}, DType::BF16), h({2, 3}, DType::F16), i32({3}, DType::I32),
      i64({5}, DType::I64), scalar({}, DType::F32), empty({0, 4}, DType::F32);
  for (int64_t i = 0; i < 15; ++i) f32->set_f32(i, 0.25f * static_cast<float>(i) - 1.0f);
  for (int64_t i = 0; i < 7; ++i) bf->set_f32(i, static_cast<float>(i) * 1.5f);
  for (int64_t i = 0; i < 6; ++i) h->set_f32(i, -static_cast<float>(i) / 4.0f);
  for (int i = 0; i < 3; ++i) i32.data<int32_t>()[i] = -7 * i;
  for (int i = 0; i < 5; ++i) i64.data<int64_t>()[i] = (int64_t{1} << 40) + i;
  scalar->set_f32(0, 3.0f);
  const std::string path = dir.file("x.safetensors");
  io::save_safetensors(path, {{"b.w", f32}, {"a", bf}, {"z", i64}, {"h", h}, {"i", i32}, {"s", scalar}, {"e", empty}},
                       {{"format", "pt"}});
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);

  // Byte layout: the header the reference writer produces (metadata first, data order by
  // dtype then name, compact JSON), padded with spaces to a multiple of 8.
  const std::string bytes = read_all(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const std::string expected =
      R"({"__metadata__":{"format":"pt"},"z":{"dtype":"I64","shape":[5],"data_offsets":[0,40]},)"
      R"("b.w":{"dtype":"F32","shape":[3,5],"data_offsets":[40,100]},)"
      R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[100,100]},)"
      R"("s":{"dtype":"F32","shape":[],"data_offsets":[100,104]},)"
      R"("i":{"dtype":"I32","shape":[3],"data_offsets":[104,116]},)"
      R"("a":{"dtype":"BF16","shape":[7],"data_offsets":[116,130]},)"
      R"("h":{"dtype":"F16","shape":[2,3],"data_offsets":[130,142]}})";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(header.find_first_not_of(' ', expected.size()), std::string::npos);
  EXPECT_EQ(bytes.size(), 8 + n + 142);

  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b.w", "e", "h", "i", "s", "z"}));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  auto same = [](const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.shape(), b.shape());
    ASSERT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  };
  same(r.tensor("b.w"), f32);
  same(r.tensor("a"), bf);
  same(r.tensor("h"), h);
  same(r.tensor("i"), i32);
  same(r.tensor("z"), i64);
  same(r.tensor("s"), scalar);
  EXPECT_EQ(r.tensor("e").shape(), (Shape{0, 4}));
  EXPECT_EQ(r.tensor("b.w").name(), "b.w");
  // Data is naturally aligned in the mapping.
  for (const auto& name : r.names())
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.bytes(name)) % dtype_size(r.tensor(name).dtype()), 0u) << name;
  try {
    r.tensor("nope");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}

TEST(Safetensors, NonContiguousAndOverwrite) {
  TempDir dir;
  OwnedTensor m({4, 6}, DType::F32);
  for (int64_t i = 0; i < 24; ++i) m->set_f32(i, static_cast<float>(i));
  const Tensor col = m->narrow(1, 2, 3);  // [4, 3], strided
  const std::string path = dir.file("y.safetensors");
  write_all(path, "old contents");
  io::save_safetensors(path, {{"col", col}, {"row", m->select(1)}});
  SafetensorsReader r(path);
  EXPECT_TRUE(r.metadata().empty());
  const Tensor c = r.tensor("col");
  ASSERT_EQ(c.shape(), (Shape{4, 3}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c.get_f32(i * 3 + j), static_cast<float>(i * 6 + 2 + j));
  EXPECT_EQ(r.tensor("row").get_f32(5), 11.0f);
}

TEST(Safetensors, WriterRejectsBadNamesAndLeavesNoFile) {
  TempDir dir;
  OwnedTensor t({2}, DType::F32);
  const std::string path = dir.file("w.safetensors");
  for (const auto& tensors : std::vector<std::vector<std::pair<std::string, Tensor>>>{
           {{"a", t}, {"a", t}}, {{"__metadata__", t}}, {{"", t}}}) {
    try {
      io::save_safetensors(path, tensors);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    }
    EXPECT_FALSE(fs::exists(path));
  }
  try {
    io::save_safetensors(dir.file("no/such/dir/x.safetensors"), {{"a", t}});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io) << e.what();
  }
  // A failing fill leaves neither the target nor a temporary file.
  std::vector<io::TensorSource> src{{"a", DType::F32, {2}, [](void*) { ZT_THROW_IO("disk on fire"); }}};
  EXPECT_THROW(io::write_safetensors(path, src), Error);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Safetensors, MalformedHeadersAreBadInput) {
  TempDir dir;
  const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string bytes;
    std::string needle;
  };
  std::vector<Case> cases = {
      {"", "not a safetensors file"},
      {"abc", "not a safetensors file"},
      {le64(200ull * 1024 * 1024) + "{}", "exceeds the limit"},
      {le64(~0ull) + "{}", "exceeds the limit"},
      {le64(100) + "{}", "runs past the end"},
      {raw_file("", 0), "not valid JSON"},
      {raw_file("{", 0), "not valid JSON"},
      {raw_file("{} x", 0), "not valid JSON"},
      {raw_file("[1,2]", 0), "must be a JSON object"},
      {raw_file("\"str\"", 0), "must be a JSON object"},
      {raw_file(std::string("{\"t\xff\":1}"), 0), "not valid JSON"},
      {raw_file(R"({"t":5})", 0), "entry must be an object"},
      {raw_file(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "'dtype'"},
      {raw_file(R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8), "'dtype'"},
      {raw_file(R"({"t":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype 'Q7'"},
      {raw_file(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8), "'shape'"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), "non-negative"},
      {raw_file(R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8), "non-negative"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8), "too large"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "data_offsets"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8), "data_offsets"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8), "data_offsets"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "end before begin"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12), "needs 8"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", 8), "run past the data region"},
      {raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", 8), "end before begin"},
      {raw_file("{" + t + R"(,"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "overlap"},
      {raw_file("{" + t + R"(,"u":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8), "overlap"},
      {raw_file("{" + t + "," + t + "}", 8), "duplicate key 't'"},
      {raw_file(R"({"t":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8), "duplicate key"},
      {raw_file("{" + t + R"(,"__metadata__":[1]})", 8), "'__metadata__' must be an object"},
      {raw_file("{" + t + R"(,"__metadata__":{"k":1}})", 8), "must be a string"},
      {raw_file(R"({"t":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]})", 0), "nested too deeply"},
      {raw_file(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2), "whole bytes"},
  };
  // A very deep nesting must not overflow the stack.
  cases.push_back(
      {raw_file("{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0), "nested too deeply"});
  int k = 0;
  for (const auto& c : cases) {
    const std::string path = dir.file("bad" + std::to_string(k++) + ".safetensors");
    write_all(path, c.bytes);
    SCOPED_TRACE(c.needle);
    expect_bad_input(path, c.needle);
  }
  expect_bad_input(dir.file("absent.safetensors"), "no such file");
  expect_bad_input(dir.path().string(), "not a regular file");
  // Messages name the tensor.
  const std::string path = dir.file("named.safetensors");
  write_all(path, raw_file(R"({"layer.7.w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  expect_bad_input(path, "layer.7.w");
}

TEST(Safetensors, AcceptsPaddingEmptyTensorsAndNullMetadata) {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  write_all(path, raw_file(R"({"__metadata__":null,"e":{"dtype":"I64","shape":[0],"data_offsets":[8,8]},)"
                           R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("u":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}}    )",
                           10));
  SafetensorsReader r(path);
  EXPECT_EQ(r.names().size(), 3u);
  EXPECT_TRUE(r.metadata().empty());
  EXPECT_EQ(r.tensor("e").numel(), 0);
  EXPECT_EQ(r.tensor("u").get_f32(0), 0.0f);
  // No tensors at all is a valid (empty) file.
  write_all(path, raw_file("{}", 0));
  EXPECT_TRUE(SafetensorsReader(path).names().empty());
}

// The data region must be tiled exactly, as PyPI safetensors requires (InvalidOffset,
// MetadataIncompleteBuffer): gaps, a leading gap and trailing bytes are refused by name.
TEST(Safetensors, GapsAndTrailingBytesAreBadInput) {
  TempDir dir;
  const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string path = dir.file("gap.safetensors");
  write_all(path, raw_file("{" + t + R"(,"u":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]}})", 14));
  expect_bad_input(path, "tensor 'u' starts at data byte 12 but tensor 't' ends at 8: a gap of 4 bytes");
  write_all(path, raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  expect_bad_input(path, "tensor 't' starts at data byte 4 but the data starts at 0");
  write_all(path, raw_file("{" + t + "}", 12));
  expect_bad_input(path, "4 trailing bytes");
  write_all(path, raw_file("{}", 3));
  expect_bad_input(path, "3 trailing bytes");
  // An empty tensor inside another one's bytes is an overlap, as in the reference.
  write_all(path, raw_file("{" + t + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 8));
  expect_bad_input(path, "overlap");
}

TEST(Safetensors, UnsupportedDtypeIsRefusedOnlyWhenUsed) {
  TempDir dir;
  const std::string path = dir.file("f64.safetensors");
  write_all(path, raw_file(R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                           R"("m":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]},)"
                           R"("t":{"dtype":"F32","shape":[1],"data_offsets":[19,23]}})",
                           23));
  SafetensorsReader r(path);
  EXPECT_FALSE(r.info("d").supported);
  EXPECT_EQ(r.info("d").dtype_name, "F64");
  EXPECT_EQ(r.tensor("t").numel(), 1);
  try {
    r.tensor("d");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'d' has dtype F64"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, TruncatedFilesAreBadInput) {
  TempDir dir;
  OwnedTensor a({16, 8}, DType::F32), b({5}, DType::BF16);
  a->fill_f32(1.0f);
  b->fill_f32(2.0f);
  const std::string good = dir.file("good.safetensors");
  io::save_safetensors(good, {{"a", a}, {"b", b}}, {{"format", "pt"}});
  const std::string bytes = read_all(good);
  const std::string path = dir.file("cut.safetensors");
  for (size_t len = 0; len < bytes.size(); len += (len < 200 ? 1 : 37)) {
    write_all(path, bytes.substr(0, len));
    try {
      SafetensorsReader r(path);
      ADD_FAILURE() << "truncated to " << len << " of " << bytes.size() << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << len << ": " << e.what();
    }
  }
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  TempDir dir;
  OwnedTensor a({4, 4}, DType::F32), b({3}, DType::I64);
  a->fill_f32(1.0f);
  const std::string good = dir.file("good.safetensors");
  io::save_safetensors(good, {{"a", a}, {"b", b}}, {{"format", "pt"}});
  const std::string bytes = read_all(good);
  std::mt19937 rng(1234);
  const std::string path = dir.file("fuzz.safetensors");
  int accepted = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::string m = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Mostly the header (the data region has no structure to break).
      const size_t pos = rng() % std::min<size_t>(m.size(), 8 + 160);
      m[pos] = static_cast<char>(rng() % 3 == 0 ? "{}[]\",:0123456789-"[rng() % 18] : static_cast<int>(rng() % 256));
    }
    write_all(path, m);
    try {
      SafetensorsReader r(path);
      for (const auto& name : r.names()) {
        const io::TensorInfo& info = r.info(name);
        if (!info.supported) continue;
        const Tensor t = r.tensor(name);
        volatile uint8_t sink = 0;  // touch every byte: must stay inside the mapping
        for (size_t i = 0; i < t.nbytes(); ++i) sink = sink + static_cast<const uint8_t*>(t.data())[i];
      }
      ++accepted;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    }
  }
  EXPECT_LT(accepted, 1000);
}

// ---- HF weights mapping -------------------------------------------------------------

namespace {

model::ParamSpec spec(std::string name, Shape shape, Shape hf_shape = {}) {
  model::ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.hf_shape = std::move(hf_shape);
  return s;
}
// Held [out, in] here, [in, out] in HF files: load and save transpose it.
model::ParamSpec conv1d(std::string name, Shape shape) {
  model::ParamSpec s = spec(std::move(name), std::move(shape));
  s.hf_layout = WeightLayout::InOut;
  return s;
}

// A small GPT-2-shaped registry (1 layer, C=4, V=10 padded to 128) filled with distinct values.
struct TinyGpt2 {
  model::ModelConfig config;
  model::ParameterRegistry reg;
  explicit TinyGpt2(bool fill = true) {
    config = model::preset_config("tiny-gpt2");
    config.vocab_size = 10;
    config.hidden_size = 4;
    config.num_heads = config.num_kv_heads = 2;
    config.head_dim = 2;
    config.intermediate_size = 16;
    config.num_layers = 1;
    config.max_position_embeddings = 6;
    const int64_t C = 4;
    reg.add_unit("embed", {spec("transformer.wte.weight", {128, C}, {10, C}), spec("transformer.wpe.weight", {6, C})},
                 1);
    const std::string p = "transformer.h.0.";
    reg.add_unit(
        "block.0",
        {spec(p + "ln_1.weight", {C}), spec(p + "ln_1.bias", {C}), conv1d(p + "attn.c_attn.weight", {3 * C, C}),
         spec(p + "attn.c_attn.bias", {3 * C}), conv1d(p + "attn.c_proj.weight", {C, C}),
         spec(p + "attn.c_proj.bias", {C}), spec(p + "ln_2.weight", {C}), spec(p + "ln_2.bias", {C}),
         conv1d(p + "mlp.c_fc.weight", {4 * C, C}), spec(p + "mlp.c_fc.bias", {4 * C}),
         conv1d(p + "mlp.c_proj.weight", {C, 4 * C}), spec(p + "mlp.c_proj.bias", {C})},
        2);
    reg.add_unit("head", {spec("transformer.ln_f.weight", {C}), spec("transformer.ln_f.bias", {C})}, 1);
    for (auto& u : reg.units()) u->allocate_params(DType::F32, Device::cpu());
    int v = 1;
    if (fill)
      reg.for_each([&](model::Unit&, model::ParamEntry& e) {
        const int64_t n = shape_numel(e.spec.hf_shape);  // padding rows stay zero
        for (int64_t i = 0; i < n; ++i) e.value.set_f32(i, static_cast<float>(v++ % 128) / 64.0f);
      });
  }
};

void expect_equal_registries(model::ParameterRegistry& a, model::ParameterRegistry& b) {
  a.for_each([&](model::Unit&, model::ParamEntry& e) {
    model::ParamEntry* o = b.find(e.name());
    ASSERT_NE(o, nullptr) << e.name();
    EXPECT_EQ(e.value.to_f32_vector(), o->value.to_f32_vector()) << e.name();
  });
}

}  // namespace

TEST(HfWeights, Gpt2SaveLayoutAndRoundTrip) {
  TempDir dir;
  TinyGpt2 src;
  const std::string path = dir.file("model.safetensors");
  model::save_hf_weights(src.reg, src.config, path, DType::F32);

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_FALSE(r.contains("lm_head.weight"));
  EXPECT_EQ(r.info("transformer.wte.weight").shape, (Shape{10, 4}));  // no padding rows
  EXPECT_EQ(r.info("transformer.h.0.attn.c_attn.weight").shape, (Shape{4, 12}));
  EXPECT_EQ(r.info("transformer.h.0.mlp.c_fc.weight").shape, (Shape{4, 16}));
  EXPECT_EQ(r.info("transformer.h.0.mlp.c_proj.weight").shape, (Shape{16, 4}));
  // Conv1D: file[i][o] == ours[o][i].
  const Tensor ours = src.reg.find("transformer.h.0.mlp.c_proj.weight")->value;  // [4, 16]
  const Tensor file = r.tensor("transformer.h.0.mlp.c_proj.weight");             // [16, 4]
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(file.get_f32(i * 4 + o), ours.get_f32(o * 16 + i));

  TinyGpt2 dst(false);
  dst.reg.find("transformer.wte.weight")->value.fill_f32(9.0f);  // padding rows must be reset to zero
  const model::HfLoadReport rep = model::load_hf_weights(dst.reg, dst.config, path);
  EXPECT_EQ(rep.loaded, 16);
  expect_equal_registries(src.reg, dst.reg);
  EXPECT_EQ(dst.reg.find("transformer.wte.weight")->value.get_f32(10 * 4), 0.0f);

  // Also through a directory, and in bf16 (values are exact in bf16: multiples of 1/64 below 2).
  model::save_hf_weights(src.reg, src.config, dir.path().string(), DType::BF16);
  EXPECT_EQ(SafetensorsReader(path).info("transformer.wpe.weight").dtype_name, "BF16");
  TinyGpt2 dst2(false);
  model::load_hf_weights(dst2.reg, dst2.config, dir.path().string());
  expect_equal_registries(src.reg, dst2.reg);
}

TEST(HfWeights, Gpt2HubNamesBuffersTiedHeadAndShards) {
  TempDir dir;
  TinyGpt2 src;
  // Rewrite the file the way the original `gpt2` hub files look: no "transformer." prefix,
  // attn.bias / masked_bias buffers, a tied lm_head.weight copy, f16 data, split in 2 shards.
  const std::string tmp = dir.file("tmp.safetensors");
  model::save_hf_weights(src.reg, src.config, tmp, DType::F32);
  SafetensorsReader r(tmp);
  std::vector<std::pair<std::string, Tensor>> s1, s2;
  OwnedTensor mask({1, 1, 6, 6}, DType::F32), masked_bias({}, DType::F32);
  std::vector<OwnedTensor> halves;
  nlohmann::json weight_map;
  for (const auto& name : r.names()) {
    const std::string hub = name.substr(std::string("transformer.").size());
    const Tensor t = r.tensor(name);
    halves.emplace_back(t.shape(), DType::F16);
    halves.back()->copy_from(t);
    auto& shard = name.find(".h.0.") != std::string::npos ? s2 : s1;
    shard.emplace_back(hub, halves.back().view());
    weight_map[hub] = &shard == &s1 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  s2.emplace_back("h.0.attn.bias", mask.view());
  s2.emplace_back("h.0.attn.masked_bias", masked_bias.view());
  s1.emplace_back("lm_head.weight", r.tensor("transformer.wte.weight"));
  const fs::path model_dir = dir.path() / "model";
  fs::create_directories(model_dir);
  io::save_safetensors((model_dir / "model-00001-of-00002.safetensors").string(), s1);
  io::save_safetensors((model_dir / "model-00002-of-00002.safetensors").string(), s2);
  write_all((model_dir / "model.safetensors.index.json").string(),
            nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());

  TinyGpt2 dst(false);
  const model::HfLoadReport rep = model::load_hf_weights(dst.reg, dst.config, model_dir.string());
  EXPECT_EQ(rep.loaded, 16);
  EXPECT_EQ(rep.skipped.size(), 3u);
  EXPECT_TRUE(rep.unused.empty());
  expect_equal_registries(src.reg, dst.reg);  // values are exact in f16
}

TEST(HfWeights, LoadErrorsNameTheTensors) {
  TempDir dir;
  TinyGpt2 src;
  const std::string path = dir.file("w.safetensors");
  model::save_hf_weights(src.reg, src.config, path, DType::F32);
  SafetensorsReader r(path);

  auto expect_load_error = [&](const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::vector<std::string>& needles) {
    const std::string bad = dir.file("bad.safetensors");
    io::save_safetensors(bad, tensors);
    TinyGpt2 dst(false);
    try {
      model::load_hf_weights(dst.reg, dst.config, bad);
      ADD_FAILURE() << "load accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  std::vector<std::pair<std::string, Tensor>> all;
  for (const auto& name : r.names()) all.emplace_back(name, r.tensor(name));
  // Two tensors missing.
  auto missing = all;
  missing.erase(std::remove_if(missing.begin(), missing.end(),
                               [](const auto& p) {
                                 return p.first == "transformer.wpe.weight" || p.first == "transformer.ln_f.bias";
                               }),
                missing.end());
  expect_load_error(missing, {"2 tensors are missing", "transformer.wpe.weight", "transformer.ln_f.bias"});
  // Conv1D weight in the wrong ([out, in]) layout.
  auto wrong = all;
  OwnedTensor transposed({12, 4}, DType::F32);
  for (auto& p : wrong)
    if (p.first == "transformer.h.0.attn.c_attn.weight") p.second = transposed;
  expect_load_error(wrong, {"transformer.h.0.attn.c_attn.weight", "[12, 4]", "[4, 12]"});
  // Integer data for a weight.
  auto ints = all;
  OwnedTensor ln({4}, DType::I32);
  for (auto& p : ints)
    if (p.first == "transformer.ln_f.weight") p.second = ln;
  expect_load_error(ints, {"transformer.ln_f.weight", "I32"});
  // Not a path at all.
  TinyGpt2 dst(false);
  EXPECT_THROW(model::load_hf_weights(dst.reg, dst.config, dir.file("absent")), Error);
  EXPECT_THROW(model::load_hf_weights(dst.reg, dst.config, (dir.path() / "empty_dir").string() + "/"), Error);
}

TEST(HfWeights, LlamaNamesArePassedThrough) {
  TempDir dir;
  model::ModelConfig c = model::preset_config("tiny-llama");
  c.vocab_size = 5;
  c.hidden_size = 4;
  c.tie_word_embeddings = false;
  model::ParameterRegistry reg;
  reg.add_unit("embed", {spec("model.embed_tokens.weight", {128, 4}, {5, 4})}, 1);
  reg.add_unit(
      "block.0",
      {spec("model.layers.0.self_attn.q_proj.weight", {4, 4}), spec("model.layers.0.mlp.down_proj.weight", {4, 6})}, 1);
  reg.add_unit("head", {spec("model.norm.weight", {4}), spec("lm_head.weight", {128, 4}, {5, 4})}, 1);
  for (auto& u : reg.units()) u->allocate_params(DType::F32, Device::cpu());
  float v = 1.0f;
  reg.for_each([&](model::Unit&, model::ParamEntry& e) {
    for (int64_t i = 0; i < shape_numel(e.spec.hf_shape); ++i) e.value.set_f32(i, v++);
  });
  const std::string path = dir.file("llama.safetensors");
  model::save_hf_weights(reg, c, path, DType::F32);
  SafetensorsReader r(path);
  EXPECT_EQ(r.info("model.layers.0.mlp.down_proj.weight").shape, (Shape{4, 6}));  // never transposed
  EXPECT_EQ(r.info("lm_head.weight").shape, (Shape{5, 4}));
  EXPECT_EQ(r.tensor("model.layers.0.mlp.down_proj.weight").get_f32(1),
            reg.find("model.layers.0.mlp.down_proj.weight")->value.get_f32(1));
}

// FP8 tensors are a storage type: a model's weights in F8_E4M3 are refused with the tensor
// and its dtype named (not cast silently), and weights are never saved in fp8.
TEST(HfWeights, Fp8WeightsAreRefusedByName) {
  TempDir dir;
  TinyGpt2 src;
  const std::string f32 = dir.file("f32.safetensors"), fp8 = dir.file("model.safetensors");
  model::save_hf_weights(src.reg, src.config, f32, DType::F32);
  SafetensorsReader r(f32);
  std::vector<OwnedTensor> keep;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& name : r.names()) {
    const bool narrow = name == "transformer.h.0.mlp.c_fc.weight";
    keep.emplace_back(r.info(name).shape, narrow ? DType::F8E4M3 : DType::F32);
    keep.back()->copy_from(r.tensor(name));
    tensors.emplace_back(name, keep.back().view());
  }
  io::save_safetensors(fp8, tensors, {{"format", "pt"}});
  TinyGpt2 dst(false);
  std::string e;
  try {
    model::load_hf_weights(dst.reg, dst.config, fp8);
  } catch (const Error& x) {
    EXPECT_EQ(x.exit_code(), 2);
    e = x.what();
  }
  EXPECT_NE(e.find("transformer.h.0.mlp.c_fc.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("F8_E4M3"), std::string::npos) << e;
  EXPECT_THROW(model::save_hf_weights(src.reg, src.config, dir.file("x.safetensors"), DType::F8E5M2), Error);
}
