// model::check_hf_config_against_weights and the memory refusal: a config.json that does
// not describe its safetensors (a huge n_layer, a huge width) is a BadInput error naming
// config.json before any allocation — a config of 10^9 layers would otherwise allocate
// the whole model first — and a model larger than free host memory is refused with the
// numbers (ZT_TEST_HOST_MEMORY_BYTES stands in for a small machine).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/input_error.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "model/config.h"
#include "model/hf_check.h"
#include "model/hf_dir.h"
#include "model/inference_load.h"
#include "model/transformer.h"

namespace zt::model {
namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("hf_check_")) {}
};

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// A saved tiny model whose config.json gets `key` = `value`.
std::string model_with(const TempDir& tmp, const std::string& key, const nlohmann::json& value) {
  ModelOptions o;
  o.allocate_grads = false;
  Transformer m(preset_config("tiny-gpt2"), o);
  m.init_weights(1);
  const std::string dir = tmp.file("m");
  save_pretrained(m, dir, DType::F32);
  const std::string cfg = dir + "/config.json";
  nlohmann::json j;
  std::ifstream(cfg) >> j;
  if (!key.empty()) j[key] = value;
  std::ofstream(cfg) << j.dump();
  return dir;
}

using zt::testing::input_error_of;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST(HfCheck, AMatchingConfigPasses) {
  TempDir tmp;
  const std::string dir = model_with(tmp, "", nullptr);
  check_hf_config_against_weights(load_hf_config(dir), dir + "/config.json", dir);
  EXPECT_EQ(load_pretrained(dir).config.num_layers, 4);
}

TEST(HfCheck, AHugeLayerCountIsRefusedBeforeAllocating) {
  TempDir tmp;
  // Within the config reader's bound on layers (2^16), the weights decide.
  const std::string dir = model_with(tmp, "n_layer", 60000);
  const std::string e = input_error_of([&] { load_pretrained(dir); });
  EXPECT_HAS(e, dir + "/config.json: the config has 60000 layers (n_layer) but the weights in " + dir + " hold 4");
  EXPECT_HAS(input_error_of([&] { load_for_inference(dir, DType::F32); }), "60000 layers");
  EXPECT_HAS(input_error_of([&] { check_hf_config_against_weights(load_hf_config(dir), "c.json", dir); }),
             "c.json: the config has 60000 layers");
  // Past it, the config itself is refused before anything is sized from it.
  TempDir tmp2;
  const std::string huge = model_with(tmp2, "n_layer", 1000000000);
  EXPECT_HAS(input_error_of([&] { load_pretrained(huge); }), "n_layer 1000000000 is larger than zerotrain supports");
}

TEST(HfCheck, FewerLayersThanTheFilesHoldStillLoad) {
  TempDir tmp;
  const std::string dir = model_with(tmp, "n_layer", 2);  // the first two blocks; the rest is ignored
  EXPECT_EQ(load_pretrained(dir).config.num_layers, 2);
}

TEST(HfCheck, AWrongWidthIsRefusedFromTheHeaders) {
  TempDir tmp;
  const std::string dir = model_with(tmp, "n_embd", 1 << 20);
  const std::string e = input_error_of([&] { load_pretrained(dir); });
  EXPECT_HAS(e, "config.json: the config gives tensor");
  EXPECT_HAS(e, "[512, 1048576]");
  EXPECT_HAS(e, "holds [512, 128]");
}

TEST(HfCheck, AModelLargerThanFreeHostMemoryIsRefused) {
  TempDir tmp;
  const std::string dir = model_with(tmp, "", nullptr);
  {
    const ScopedEnv small("ZT_TEST_HOST_MEMORY_BYTES", "1000000");  // 1 MB; the model is ~3.6 MB in f32
    const std::string e = input_error_of([&] { load_pretrained(dir); });
    EXPECT_HAS(e, "the model's parameters");
    EXPECT_HAS(e, "of host memory, but only 976.56 KiB is available");
    EXPECT_HAS(input_error_of([&] { check_fits_host_memory(2e6, "two megabytes"); }), "two megabytes need 1.91 MiB");
  }
  EXPECT_EQ(load_pretrained(dir).config.num_layers, 4);  // the real machine has room
  EXPECT_TRUE(host_available_bytes().has_value());       // /proc/meminfo is read
}

TEST(HfCheck, ParameterCountInFloatingPointDoesNotOverflow) {
  ModelConfig c = preset_config("tiny-gpt2");
  EXPECT_DOUBLE_EQ(c.num_parameters_f64(), static_cast<double>(c.num_parameters()));
  c.num_layers = 1000000000000LL;
  c.hidden_size = 1 << 20;
  EXPECT_GT(c.num_parameters_f64(), 1e21);  // int64 tops out at 9.2e18
}

}  // namespace
}  // namespace zt::model
