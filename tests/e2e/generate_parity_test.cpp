// Generation and evaluation parity with PyTorch: a HF directory written with
// save_hf_weights + config_to_hf_json is loaded back (model::load_for_inference) and
//  - greedy generation with the KV-cache engine equals tools/torch_generate.py's greedy
//    generation (float64 reference, full recompute each step, no cache);
//  - train::evaluate's mean loss equals the reference's windowed loss (1e-5 relative);
//  - the `zerotrain eval` and `zerotrain generate` commands, on a GPT-2 directory with
//    GPT-2's tokenizer files, print the same loss and text.
// Skipped when python3 with torch is missing. Files stay in build/test_tmp/ on failure
// (always with ZT_KEEP_TEST_FILES=1).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/oracle.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "common/perturb.h"
#include "model/transformer.h"
#include "train/evaluate.h"
#include "train/generate.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::model;

namespace {

constexpr double kLossRelTol = 1e-5;

using zt::testing::read_text;
using zt::testing::run_command;
using zt::testing::torch_unavailable;

using zt::testing::perturb;

// A HF directory (config.json + model.safetensors) holding a perturbed random model.
class ModelDir {
 public:
  ModelDir(const std::string& label, const ModelConfig& c)
      : dir_(fs::path(ZT_BINARY_DIR) / "test_tmp" / ("generate_parity_" + std::to_string(::getpid()) + "_" + label)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ModelOptions o;
    o.allocate_grads = false;
    Transformer m(c, o);
    m.init_weights(4321);
    perturb(m, 17);
    save_hf_weights(m.registry(), c, (dir_ / "model.safetensors").string(), DType::F32);
    std::ofstream(dir_ / "config.json") << config_to_hf_json(c).dump(2);
  }
  ~ModelDir() {
    if (!::testing::Test::HasFailure() && !std::getenv("ZT_KEEP_TEST_FILES")) fs::remove_all(dir_);
  }
  const fs::path& path() const { return dir_; }

  // Runs tools/torch_generate.py with `args`; returns its JSON output.
  nlohmann::json reference(const std::string& label, const std::string& args) const {
    const fs::path out = dir_ / (label + ".json"), log = dir_ / (label + ".log");
    const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/torch_generate.py' --config '" +
                            (dir_ / "config.json").string() + "' --weights '" + (dir_ / "model.safetensors").string() +
                            "' --out '" + out.string() + "' " + args + " > '" + log.string() + "' 2>&1";
    const int rc = run_command(cmd);
    EXPECT_EQ(rc, 0) << cmd << "\n" << read_text(log);
    if (rc != 0) return nlohmann::json::object();
    return nlohmann::json::parse(read_text(out));
  }

 private:
  fs::path dir_;
};

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  return t;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

void check_greedy(const ModelDir& dir, int64_t V) {
  const std::vector<int32_t> prompt = random_tokens(8, V, 5);
  const int64_t n = 20;
  const nlohmann::json ref =
      dir.reference("greedy", "--generate --prompt-ids " + join(prompt) + " --max-new-tokens " + std::to_string(n));
  ASSERT_TRUE(ref.contains("tokens"));
  const std::vector<int32_t> want = ref["tokens"].get<std::vector<int32_t>>();
  const std::vector<double> margins = ref["margins"].get<std::vector<double>>();

  InferenceModel m = load_for_inference(dir.path().string());
  InferenceEngine engine(*m.model);
  train::GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.decoding = train::Decoding::Greedy;
  const train::GenerateResult r = train::generate(engine, prompt, o);
  std::printf("[generate parity] %lld greedy tokens, smallest top-1/top-2 logit margin %.3g\n",
              static_cast<long long>(n), *std::min_element(margins.begin(), margins.end()));
  EXPECT_EQ(r.tokens, want);
}

void check_eval(const ModelDir& dir, int64_t V) {
  const std::vector<std::vector<int32_t>> docs = {
      random_tokens(53, V, 1), random_tokens(7, V, 2), {3}, random_tokens(17, V, 3), random_tokens(32, V, 4)};
  const int64_t T = 16;
  { std::ofstream(dir.path() / "docs.json") << nlohmann::json(docs).dump(); }
  const nlohmann::json ref =
      dir.reference("eval", "--eval '" + (dir.path() / "docs.json").string() + "' --seq-len " + std::to_string(T));
  ASSERT_TRUE(ref.contains("mean_loss"));
  InferenceModel m = load_for_inference(dir.path().string());
  train::EvalOptions o;
  o.seq_len = T;
  o.batch_size = 3;
  const train::EvalResult r = train::evaluate(*m.model, docs, o);
  const double want = ref["mean_loss"].get<double>();
  std::printf("[eval parity] %lld tokens, mean loss %.9f (reference %.9f), rel err %.2e\n",
              static_cast<long long>(r.tokens), r.mean_loss(), want, std::fabs(r.mean_loss() - want) / want);
  EXPECT_EQ(r.tokens, ref["tokens"].get<int64_t>());
  EXPECT_LT(std::fabs(r.mean_loss() - want) / want, kLossRelTol);
}

ModelConfig llama_gqa() {
  ModelConfig c = preset_config("tiny-llama");
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rope.head_dim = 32;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;  // Llama's attention_bias + mlp_bias
  c.tie_word_embeddings = false;
  c.vocab_size = 500;
  c.rope.theta = 500000.0f;
  c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  c.rope.scaling.factor = 8.0f;
  c.rope.scaling.low_freq_factor = 1.0f;
  c.rope.scaling.high_freq_factor = 4.0f;
  c.rope.scaling.original_max_position_embeddings = 16;
  c.validate("llama gqa");
  return c;
}

}  // namespace

TEST(GenerateParity, Gpt2GreedyAndEval) {
  const std::string why = torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << "PyTorch parity skipped: " << why;
  const ModelConfig c = preset_config("tiny-gpt2");
  ModelDir dir("gpt2", c);
  check_greedy(dir, c.vocab_size);
  check_eval(dir, c.vocab_size);
}

TEST(GenerateParity, LlamaGqaLlama3RopeGreedyAndEval) {
  const std::string why = torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << "PyTorch parity skipped: " << why;
  const ModelConfig c = llama_gqa();
  ModelDir dir("llama", c);
  check_greedy(dir, c.vocab_size);
  check_eval(dir, c.vocab_size);
}

// The commands end to end on a GPT-2 directory with GPT-2's own tokenizer files.
TEST(GenerateParity, EvalAndGenerateCommandsOnAGpt2Directory) {
  const std::string why = torch_unavailable();
  if (!why.empty()) GTEST_SKIP() << "PyTorch parity skipped: " << why;
  const fs::path exe = fs::path(ZT_BINARY_DIR) / "zerotrain";
  if (!fs::exists(exe)) GTEST_SKIP() << exe << " is not built (build the zerotrain target)";
  ModelConfig c = preset_config("tiny-gpt2");
  c.vocab_size = 50257;
  c.bos_token_id = c.eos_token_id = 50256;
  ModelDir dir("gpt2_cli", c);
  const fs::path vocab = fs::path(ZT_SOURCE_DIR) / "tests" / "data" / "gpt2";
  fs::copy_file(vocab / "vocab.json", dir.path() / "vocab.json");
  fs::copy_file(vocab / "merges.txt", dir.path() / "merges.txt");
  const auto tok = io::load_tokenizer(dir.path().string());

  // eval: the loss the command prints equals the reference's on the same tokens.
  const std::string text =
      "Hello world, this is a test of the evaluation command. It reads a file and scores it "
      "in windows of the context; every token but the first is predicted once.";
  std::ofstream(dir.path() / "data.txt") << text;
  const std::vector<std::vector<int32_t>> docs = {tok->encode(text, io::SpecialTokens::Add)};
  std::ofstream(dir.path() / "docs.json") << nlohmann::json(docs).dump();
  const nlohmann::json ref =
      dir.reference("cli_eval", "--eval '" + (dir.path() / "docs.json").string() + "' --seq-len 8");
  const fs::path out = dir.path() / "eval.out";
  const std::string cmd = "'" + exe.string() + "' eval --model '" + dir.path().string() + "' --data '" +
                          (dir.path() / "data.txt").string() + "' --seq-len 8 > '" + out.string() + "' 2>&1";
  ASSERT_EQ(run_command(cmd), 0) << cmd << "\n" << read_text(out);
  const std::string printed = read_text(out);
  const size_t at = printed.find("mean loss ");
  ASSERT_NE(at, std::string::npos) << printed;
  const double loss = std::stod(printed.substr(at + 10));
  const double want = ref["mean_loss"].get<double>();
  EXPECT_LT(std::fabs(loss - want) / want, 1e-5) << printed;  // printed with 6 decimals
  EXPECT_NE(printed.find("tokens " + std::to_string(ref["tokens"].get<int64_t>()) + " "), std::string::npos) << printed;

  // generate --greedy: the prompt, then the reference's greedy tokens as text.
  const std::string prompt = "The quick brown fox";
  const std::vector<int32_t> ids = tok->encode(prompt, io::SpecialTokens::Add);
  const nlohmann::json g = dir.reference("cli_greedy", "--generate --prompt-ids " + join(ids) + " --max-new-tokens 12");
  const std::string want_text = prompt + tok->decode(g["tokens"].get<std::vector<int32_t>>(), true) + "\n";
  const fs::path gout = dir.path() / "generate.out";
  const std::string gcmd = "'" + exe.string() + "' generate --model '" + dir.path().string() + "' --prompt '" + prompt +
                           "' --greedy --ignore-eos --max-new-tokens 12 --log-level warn > '" + gout.string() + "'";
  ASSERT_EQ(run_command(gcmd), 0) << gcmd;
  EXPECT_EQ(read_text(gout), want_text);

  // Bad input: exit code 2 and a message naming the problem.
  const fs::path bad = dir.path() / "bad.out";
  EXPECT_EQ(run_command("'" + exe.string() + "' generate --model '" + (dir.path() / "missing").string() +
                        "' --prompt x > '" + bad.string() + "' 2>&1"),
            2);
  EXPECT_NE(read_text(bad).find("not a directory"), std::string::npos) << read_text(bad);
}
