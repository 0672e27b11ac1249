// HF model directories: save_pretrained -> load_pretrained is bitwise, shards are cut and
// indexed as transformers does, names/shapes/dtypes are what GPT2LMHeadModel /
// LlamaForCausalLM expect (checked by tools/hf_names_oracle.py with PyPI safetensors), and
// bad directories are clear errors that leave nothing behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/output_file.h"
#include "model/config.h"
#include "model/hf_dir.h"
#include "model/hf_weights.h"
#include "model/transformer.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::model;

namespace {

// This file's per-test scratch directory: build/test_tmp/hf_dir_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("hf_dir_")) {}
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::unique_ptr<Transformer> make_model(const ModelConfig& c, DType dtype, uint64_t seed) {
  ModelOptions o;
  o.param_dtype = dtype;
  o.allocate_grads = false;
  auto m = std::make_unique<Transformer>(c, o);
  m->init_weights(seed);
  return m;
}

// Every parameter's file-visible elements (vocab padding rows excluded) are bitwise equal.
void expect_bitwise_equal(const Transformer& a, const Transformer& b) {
  ASSERT_EQ(a.registry().size(), b.registry().size());
  int compared = 0;
  a.registry().for_each([&](const Unit&, const ParamEntry& e) {
    const ParamEntry* o = const_cast<ParameterRegistry&>(b.registry()).find(e.name());
    ASSERT_NE(o, nullptr) << e.name();
    ASSERT_EQ(e.value.dtype(), o->value.dtype()) << e.name();
    const Shape& hf = e.spec.hf_shape.empty() ? e.spec.shape : e.spec.hf_shape;
    const size_t bytes = static_cast<size_t>(shape_numel(hf)) * dtype_size(e.value.dtype());
    EXPECT_EQ(std::memcmp(e.value.data(), o->value.data(), bytes), 0) << e.name() << " differs";
    ++compared;
  });
  EXPECT_GT(compared, 0);
}

// All regular files of two directories have equal names and bytes.
void expect_same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> na, nb;
  for (const auto& e : fs::directory_iterator(a)) na.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) nb.push_back(e.path().filename().string());
  std::sort(na.begin(), na.end());
  std::sort(nb.begin(), nb.end());
  ASSERT_EQ(na, nb);
  for (const auto& n : na) EXPECT_TRUE(read_all(a + "/" + n) == read_all(b + "/" + n)) << n << " differs";
}

// Runs tools/hf_names_oracle.py on saved directories (one interpreter for all of them);
// returns its exit status, with its output in `out`.
int run_hf_oracle(const std::vector<std::string>& dirs, std::string& out) {
  const std::string log = dirs.front() + ".oracle.log";
  std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/hf_names_oracle.py'";
  for (const auto& d : dirs) cmd += " '" + d + "'";
  cmd += " > '" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  out = read_all(log);
  fs::remove(log);
  return rc;
}
void expect_hf_layout(const std::vector<std::string>& dirs) {
  std::string out;
  EXPECT_EQ(run_hf_oracle(dirs, out), 0)
      << out << "(the oracle needs the .venv with PyPI safetensors: scripts/install_deps.sh)";
}

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
  }
}

bool has_leftovers(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.find(".old-") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST(HfDir, Gpt2RoundTripIsBitwiseAndStable) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-gpt2"), DType::F32, 7);
  const std::string a = tmp.file("a"), b = tmp.file("b");
  save_pretrained(*model, a, DType::F32);
  EXPECT_TRUE(fs::exists(a + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(a + "/model.safetensors.index.json"));
  Pretrained p = load_pretrained(a);
  EXPECT_EQ(p.config.model_type, "gpt2");
  EXPECT_EQ(p.config.vocab_size, 512);
  expect_bitwise_equal(*model, *p.model);
  save_pretrained(*p.model, b, DType::F32);  // load -> save reproduces every byte
  expect_same_files(a, b);
  expect_hf_layout({a});
  // The oracle does catch a mismatch: an untied config needs lm_head.weight.
  nlohmann::json cj = nlohmann::json::parse(read_all(b + "/config.json"));
  cj["tie_word_embeddings"] = false;
  write_all(b + "/config.json", cj.dump());
  std::string out;
  EXPECT_NE(run_hf_oracle({b}, out), 0);
  EXPECT_NE(out.find("missing lm_head.weight"), std::string::npos) << out;
  const nlohmann::json gen = nlohmann::json::parse(read_all(a + "/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 0);
  EXPECT_EQ(gen["eos_token_id"], 0);
  EXPECT_FALSE(has_leftovers(tmp.path()));
}

TEST(HfDir, Bf16AndF16Files) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-llama"), DType::BF16, 3);
  save_pretrained(*model, tmp.file("bf16"), DType::BF16);
  ModelOptions o;
  o.param_dtype = DType::BF16;
  o.allocate_grads = false;
  Pretrained p = load_pretrained(tmp.file("bf16"), o);
  expect_bitwise_equal(*model, *p.model);
  EXPECT_EQ(nlohmann::json::parse(read_all(tmp.file("bf16") + "/config.json"))["torch_dtype"], "bfloat16");
  // GPT-2 in bf16: the Conv1D transposes run on 16-bit tiles (the SIMD path for full
  // 64x64 tiles, the scalar one for the edges: n_inner 344 is not a multiple of 64).
  ModelConfig g = preset_config("tiny-gpt2");
  g.intermediate_size = 344;
  auto gpt2 = make_model(g, DType::BF16, 4);
  save_pretrained(*gpt2, tmp.file("gpt2_bf16"), DType::BF16);
  Pretrained pg = load_pretrained(tmp.file("gpt2_bf16"), o);
  expect_bitwise_equal(*gpt2, *pg.model);
  // And the same values through f32 files (the converting path).
  save_pretrained(*gpt2, tmp.file("gpt2_f32"), DType::F32);
  expect_bitwise_equal(*gpt2, *load_pretrained(tmp.file("gpt2_f32"), o).model);
  // f16 files of bf16-exact values load back to the same f32 numbers.
  save_pretrained(*model, tmp.file("f16"), DType::F16);
  EXPECT_EQ(nlohmann::json::parse(read_all(tmp.file("f16") + "/config.json"))["torch_dtype"], "float16");
  expect_hf_layout({tmp.file("bf16"), tmp.file("f16")});
  Pretrained q = load_pretrained(tmp.file("f16"));
  EXPECT_EQ(q.model->registry().find("model.norm.weight")->value.get_f32(0), 1.0f);
}

TEST(HfDir, ShardedRoundTripAndIndex) {
  TempDir tmp;
  ModelConfig c = preset_config("tiny-llama");
  c.tie_word_embeddings = false;
  auto model = make_model(c, DType::F32, 11);
  const std::string dir = tmp.file("sharded");
  const uint64_t limit = 300'000;  // bytes; tiny-llama's largest tensors are ~ 260 KB in f32
  save_pretrained(*model, dir, DType::F32, limit);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(read_all(dir + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  ASSERT_GT(files.size(), 2u);
  const int n = static_cast<int>(files.size());
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const std::string f = shard_file_name(i, n);
    ASSERT_TRUE(files.count(f)) << f;
    const uint64_t size = fs::file_size(dir + "/" + f);
    total += size;
    // Only a shard of a single tensor may exceed the limit (tensor bytes, not file bytes).
    int tensors_in_file = 0;
    for (const auto& [name, file] : index["weight_map"].items()) tensors_in_file += file == f;
    if (tensors_in_file > 1) {
      EXPECT_LE(size, limit + 4096) << f;
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), [&] {
    int64_t bytes = 0;
    model->registry().for_each([&](const Unit&, const ParamEntry& e) {
      const Shape& hf = e.spec.hf_shape.empty() ? e.spec.shape : e.spec.hf_shape;
      bytes += shape_numel(hf) * 4;
    });
    return bytes;
  }());
  EXPECT_EQ(index["metadata"]["total_parameters"].get<int64_t>(), c.num_parameters());
  Pretrained p = load_pretrained(dir);
  expect_bitwise_equal(*model, *p.model);
  expect_hf_layout({dir});
  // Re-saving the loaded model reproduces the shards byte for byte.
  save_pretrained(*p.model, tmp.file("again"), DType::F32, limit);
  expect_same_files(dir, tmp.file("again"));
}

TEST(HfDir, HfNamesForEveryFamily) {
  TempDir tmp;
  struct Case {
    std::string name;
    ModelConfig config;
  };
  std::vector<Case> cases;
  ModelConfig g = preset_config("tiny-gpt2");
  g.tie_word_embeddings = false;
  g.intermediate_size = 3 * g.hidden_size;  // n_inner set
  cases.push_back({"gpt2_untied", g});
  ModelConfig l = preset_config("tiny-llama");
  l.qkv_bias = l.attn_out_bias = l.mlp_bias = true;  // attention_bias + mlp_bias
  l.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  cases.push_back({"llama_biases", l});
  ModelConfig q = preset_config("tiny-llama");
  q.model_type = "qwen2";
  q.qkv_bias = true;
  q.attn_out_bias = q.mlp_bias = false;
  cases.push_back({"qwen2", q});
  ModelConfig m = preset_config("tiny-llama");
  m.model_type = "mistral";
  m.head_dim = 16;  // head_dim != hidden/heads
  m.rope.head_dim = 16;
  cases.push_back({"mistral_head_dim", m});
  std::vector<std::string> dirs;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = make_model(c.config, DType::F32, 5);
    const std::string dir = tmp.file(c.name);
    save_pretrained(*model, dir, DType::BF16);
    dirs.push_back(dir);
    Pretrained p = load_pretrained(dir);
    EXPECT_EQ(p.config.model_type, c.config.model_type);
    EXPECT_EQ(p.config.qkv_bias, c.config.qkv_bias);
    EXPECT_EQ(p.config.attn_out_bias, c.config.attn_out_bias);
    EXPECT_EQ(p.config.mlp_bias, c.config.mlp_bias);
    EXPECT_EQ(p.config.head_dim, c.config.head_dim);
    EXPECT_EQ(p.config.tie_word_embeddings, c.config.tie_word_embeddings);
    EXPECT_EQ(p.config.intermediate_size, c.config.intermediate_size);
  }
  expect_hf_layout(dirs);
}

TEST(HfDir, ReplacesOldDirectoryKeepingOtherFilesAndCopiesTokenizer) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-llama"), DType::F32, 1);
  const std::string dir = tmp.file("model");
  save_pretrained(*model, dir, DType::F32, 100'000);  // sharded
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  write_all(dir + "/README.md", "notes");
  fs::create_directories(tmp.file("tok"));
  const std::string gpt2 = std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2/";
  fs::copy_file(gpt2 + "vocab.json", tmp.file("tok") + "/vocab.json");
  fs::copy_file(gpt2 + "merges.txt", tmp.file("tok") + "/merges.txt");
  write_all(tmp.file("tok") + "/tokenizer_config.json", "{}");
  write_all(tmp.file("tok") + "/unrelated.txt", "x");
  SavePretrainedOptions o;
  o.tokenizer_files = {tmp.file("tok")};
  save_pretrained(*model, dir, o);  // now one file: the old shards and index must go
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  const std::set<std::string> expected = {"README.md",         "config.json", "generation_config.json",
                                          "model.safetensors", "vocab.json",  "merges.txt",
                                          "tokenizer_config.json"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(read_all(dir + "/README.md"), "notes");
  EXPECT_EQ(read_all(dir + "/tokenizer_config.json"), "{}");  // the source's own, as it is
  EXPECT_FALSE(has_leftovers(tmp.path()));
  expect_bitwise_equal(*model, *load_pretrained(dir).model);

  // A missing tokenizer fails before anything is written; the old directory is untouched.
  const std::string before = read_all(dir + "/model.safetensors");
  o.tokenizer_files = {tmp.file("no_such_tokenizer")};
  expect_error([&] { save_pretrained(*model, dir, o); }, ErrorKind::BadInput, {"no_such_tokenizer", "not found"});
  EXPECT_TRUE(read_all(dir + "/model.safetensors") == before);
  EXPECT_FALSE(has_leftovers(tmp.path()));
  // Saving onto a file is refused.
  write_all(tmp.file("afile"), "x");
  expect_error([&] { save_pretrained(*model, tmp.file("afile"), DType::F32); }, ErrorKind::BadInput,
               {"afile", "not a directory"});
  expect_error([&] { save_pretrained(*model, tmp.file("i32"), DType::I32); }, ErrorKind::BadInput, {"f32, bf16"});
  EXPECT_FALSE(fs::exists(tmp.file("i32")));
}

TEST(HfDir, BadDirectoriesAreClearErrors) {
  TempDir tmp;
  expect_error([&] { load_pretrained(tmp.file("absent")); }, ErrorKind::BadInput, {"absent", "not a model directory"});
  const std::string dir = tmp.file("m");
  fs::create_directories(dir);
  expect_error([&] { load_pretrained(dir); }, ErrorKind::BadInput, {"config.json", "missing"});
  write_all(dir + "/config.json", "{\"model_type\": \"gpt2\", ");
  expect_error([&] { load_pretrained(dir); }, ErrorKind::BadInput, {"config.json", "not valid JSON"});
  write_all(dir + "/config.json", "[]");
  expect_error([&] { load_pretrained(dir); }, ErrorKind::BadInput, {"config.json", "JSON object"});
  write_all(dir + "/config.json", R"({"model_type": "bert"})");
  expect_error([&] { load_pretrained(dir); }, ErrorKind::Unsupported, {"config.json", "model_type 'bert'"});
  // Valid config, no weights.
  write_all(dir + "/config.json", config_to_hf_json(preset_config("tiny-gpt2")).dump());
  expect_error([&] { load_pretrained(dir); }, ErrorKind::BadInput, {"model.safetensors"});
  // Weights of another shape.
  auto small = make_model(preset_config("tiny-gpt2"), DType::F32, 1);
  save_pretrained(*small, tmp.file("small"), DType::F32);
  ModelConfig wider = preset_config("tiny-gpt2");
  wider.hidden_size = 256;
  wider.head_dim = 64;
  write_all(tmp.file("small") + "/config.json", config_to_hf_json(wider).dump());
  expect_error([&] { load_pretrained(tmp.file("small")); }, ErrorKind::BadInput, {"transformer.wte.weight", "shape"});
  // A truncated weights file.
  auto ok = make_model(preset_config("tiny-gpt2"), DType::F32, 1);
  save_pretrained(*ok, tmp.file("cut"), DType::F32);
  const std::string w = tmp.file("cut") + "/model.safetensors";
  fs::resize_file(w, fs::file_size(w) - 100);
  expect_error([&] { load_pretrained(tmp.file("cut")); }, ErrorKind::BadInput, {"model.safetensors", "truncated"});
}

TEST(HfDir, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("5GB", "x"), 5'000'000'000ull);
  EXPECT_EQ(parse_byte_size("500MB", "x"), 500'000'000ull);
  EXPECT_EQ(parse_byte_size("2GiB", "x"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1.5kb", "x"), 1500ull);
  EXPECT_EQ(parse_byte_size("1000", "x"), 1000ull);
  expect_error([] { parse_byte_size("5XB", "--max-shard-size"); }, ErrorKind::BadInput, {"--max-shard-size", "XB"});
  expect_error([] { parse_byte_size("GB", "--max-shard-size"); }, ErrorKind::BadInput, {"not a size"});
  expect_error([] { parse_byte_size("0", "--max-shard-size"); }, ErrorKind::BadInput, {"at least 1 byte"});
}

// A ZeRO-3 rank reads only its slice of each unit: every slice of every unit, at three
// world sizes, equals that range of the fully loaded model (Llama: packed q/k/v, untied
// padded head, bf16 file into f32; GPT-2: tied, Conv1D layout).
TEST(HfDir, UnitSlicesEqualTheFullLoad) {
  for (const char* preset : {"tiny-llama", "tiny-gpt2"}) {
    TempDir dir;
    ModelConfig c = preset_config(preset);
    if (c.family == Family::Llama) {
      c.tie_word_embeddings = false;
      c.vocab_size = 300;  // padded to 384
    }
    auto model = make_model(c, DType::F32, 5);
    save_pretrained(*model, dir.path().string(), DType::BF16);
    auto full = load_pretrained(dir.path().string()).model;
    for (int world : {1, 3, 4}) {
      ModelOptions o;
      o.shard_count = world;
      o.allocate_grads = false;
      o.allocate_params = false;
      Transformer sharded(c, o);
      for (size_t u = 0; u < full->registry().size(); ++u) {
        const Unit& unit = sharded.registry().unit(u);
        const Tensor whole = full->registry().unit(u).flat_params();
        const int64_t part = unit.padded_numel() / world;
        for (int r = 0; r < world; ++r) {
          OwnedTensor out({part}, DType::F32);
          load_hf_unit_slice(c, dir.path().string(), unit, r * part, out);
          const int64_t n = std::max<int64_t>(0, std::min(part, unit.numel() - r * part));
          EXPECT_EQ(std::memcmp(out->data(), whole.narrow(0, r * part, n).data(), static_cast<size_t>(n) * 4), 0)
              << preset << " unit " << unit.name() << " rank " << r << " of " << world;
        }
      }
    }
  }
}

// A save that writes a tokenizer replaces the old one whole: a tokenizer.json of the
// previous tokenizer must not survive beside new vocab.json + merges.txt (HF would load
// it first). Copies under the standard name go into the same staging directory.
TEST(HfDir, NewTokenizerReplacesTheOldTokenizerFiles) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-llama"), DType::F32, 1);
  const std::string dir = tmp.file("model");
  io::BpeTrainOptions bo;
  bo.vocab_size = 300;
  write_all(tmp.file("old_tokenizer.json"), io::train_bpe_tokenizer_json({"an old tokenizer's text"}, bo));
  SavePretrainedOptions o;
  o.tokenizer_files = {tmp.file("old_tokenizer.json")};
  save_pretrained(*model, dir, o);
  EXPECT_EQ(read_all(dir + "/tokenizer.json"), read_all(tmp.file("old_tokenizer.json")));
  EXPECT_TRUE(fs::exists(dir + "/special_tokens_map.json"));
  write_all(dir + "/README.md", "notes");
  fs::create_directories(tmp.file("tok2"));
  const std::string gpt2 = std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2/";
  fs::copy_file(gpt2 + "vocab.json", tmp.file("tok2") + "/vocab.json");
  fs::copy_file(gpt2 + "merges.txt", tmp.file("tok2") + "/merges.txt");
  SavePretrainedOptions o2;
  o2.tokenizer_files = {tmp.file("tok2")};
  save_pretrained(*model, dir, o2);
  EXPECT_FALSE(fs::exists(dir + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir + "/vocab.json"));
  EXPECT_TRUE(fs::exists(dir + "/merges.txt"));
  EXPECT_NE(read_all(dir + "/tokenizer_config.json").find("GPT2Tokenizer"), std::string::npos);
  EXPECT_EQ(read_all(dir + "/README.md"), "notes");
  // A save without a tokenizer keeps the one there.
  save_pretrained(*model, dir, DType::F32);
  EXPECT_TRUE(fs::exists(dir + "/vocab.json"));
  EXPECT_FALSE(has_leftovers(tmp.path()));
}

// Staging directories of killed processes (dead pid) beside a model directory are removed
// by the next save; a live process's are left alone.
TEST(HfDir, StagingLeftByADeadProcessIsRemovedByTheNextSave) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-llama"), DType::F32, 1);
  const std::string dir = tmp.file("model");
  // What a process leaves is a marked folder (io/output_file.h); a user's folder of a like
  // name is not.
  const auto marked = [](const std::string& path, long pid) {
    fs::create_directories(path);
    std::ofstream(path + "/" + io::kStagingMarker) << "zerotrain staging folder\npid " << pid << "\n";
  };
  marked(dir + ".tmp-999999999-0", 999999999);
  marked(dir + ".old-999999999-3", 999999999);
  fs::create_directories(dir + ".old-2024-01-15");
  std::ofstream(dir + ".old-2024-01-15/model.safetensors") << "the user's backup";
  const std::string live = dir + ".tmp-" + std::to_string(::getppid()) + "-7";
  marked(live, ::getppid());
  save_pretrained(*model, dir, DType::F32);
  EXPECT_FALSE(fs::exists(dir + ".tmp-999999999-0"));
  EXPECT_FALSE(fs::exists(dir + ".old-999999999-3"));
  EXPECT_EQ(read_all(dir + ".old-2024-01-15/model.safetensors"), "the user's backup");
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(live);
}

// A 16-bit GPU run stages an HF directory in a host model before copying it to the device:
// its own options (16-bit activations, a GPU device) are refused on the host, the staging
// options load the same weights (the regression: fine-tuning an HF directory with --bf16
// or --fp16 on the GPU at ZeRO stages 0-2 failed with "activations in f16 need the GPU").
TEST(HfDir, HostStagingOptionsOfA16BitGpuRunLoadOnTheCpu) {
  TempDir tmp;
  auto model = make_model(preset_config("tiny-gpt2"), DType::F16, 5);
  save_pretrained(*model, tmp.file("f16"), DType::F16);
  for (DType d : {DType::BF16, DType::F16}) {
    ModelOptions gpu_run;
    gpu_run.param_dtype = gpu_run.grad_dtype = gpu_run.activation_dtype = d;
    gpu_run.device = Device::cuda(0);
    gpu_run.allocate_params = false;
    EXPECT_THROW(Transformer(preset_config("tiny-gpt2"),
                             [&] {
                               ModelOptions o = gpu_run;
                               o.device = Device::cpu();
                               return o;
                             }()),
                 Error);
    const ModelOptions host = host_staging_options(gpu_run);
    EXPECT_TRUE(host.device.is_cpu());
    EXPECT_EQ(host.activation_dtype, DType::F32);
    EXPECT_EQ(host.param_dtype, d);
    EXPECT_FALSE(host.allocate_grads);
    EXPECT_TRUE(host.allocate_params);
    Pretrained p = load_pretrained(tmp.file("f16"), host);
    EXPECT_EQ(p.model->registry().unit(0).flat_params().dtype(), d);
  }
}
