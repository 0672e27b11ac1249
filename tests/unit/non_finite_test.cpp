// Non-finite values never enter or leave through files: HF weights (the whole load and a
// ZeRO-3 slice) and checkpoint shards holding NaN/Inf are BadInput naming the file and the
// tensor, as is a load into a dtype the values overflow; a save refuses non-finite
// parameters or state and keeps the earlier checkpoints (keep_last prunes only after a
// save succeeded); consolidate refuses NaN input and an output dtype the weights overflow;
// a config.json norm epsilon that is not a small positive number names its key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/consolidate.h"
#include "common/input_error.h"
#include "common/poke_tensor.h"
#include "common/small_models.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/hf_dir.h"
#include "model/hf_weights.h"
#include "model/transformer.h"

using namespace zt;
namespace fs = std::filesystem;
using zt::testing::input_error_of;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("non_finite_")) {}
};

std::unique_ptr<model::Transformer> make_model(const model::ModelConfig& c, uint64_t seed) {
  model::ModelOptions o;
  o.allocate_grads = false;
  auto m = std::make_unique<model::Transformer>(c, o);
  m->init_weights(seed);
  return m;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(NonFinite, HfWeightsWithNanOrInfNameTheFileAndTensor) {
  const std::string tensor = "transformer.h.1.mlp.c_fc.weight";
  for (const auto& [dtype, value] : {std::pair{DType::F32, kNaN}, std::pair{DType::BF16, kInf}}) {
    TempDir tmp;
    const std::string dir = tmp.file("model");
    model::save_pretrained(*make_model(model::preset_config("tiny-gpt2"), 3), dir, dtype);
    model::load_pretrained(dir);  // the untouched file loads
    zt::testing::poke_tensor(dir + "/model.safetensors", tensor, 17, value);
    const std::string e = input_error_of([&] { model::load_pretrained(dir); });
    EXPECT_NE(e.find(dir + "/model.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("'" + tensor + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
    // A ZeRO-3 rank's slice of the unit holding it.
    const model::ModelConfig c = model::load_hf_config(dir);
    model::ModelOptions o;
    o.allocate_grads = false;
    o.allocate_params = false;
    model::Transformer sharded(c, o);
    const model::Unit& block1 = *sharded.registry().units()[2];
    ASSERT_EQ(block1.name(), "block.1");
    OwnedTensor out({block1.padded_numel()}, DType::F32);
    const std::string s = input_error_of([&] { model::load_hf_unit_slice(c, dir, block1, 0, out); });
    EXPECT_NE(s.find("'" + tensor + "'"), std::string::npos) << s;
  }
}

// Finite f32 weights past f16's range would load as Inf into an f16 model.
TEST(NonFinite, WeightsBeyondTheLoadDtypeAreRefused) {
  TempDir tmp;
  const std::string dir = tmp.file("model");
  model::save_pretrained(*make_model(model::preset_config("tiny-gpt2"), 3), dir, DType::F32);
  zt::testing::poke_tensor(dir + "/model.safetensors", "transformer.wte.weight", 5, 1e6f);
  model::ModelOptions o;
  o.param_dtype = DType::F16;
  o.allocate_grads = false;
  const std::string e = input_error_of([&] { model::load_pretrained(dir, o); });
  EXPECT_NE(e.find("'transformer.wte.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("f16's range"), std::string::npos) << e;
}

TEST(NonFinite, NormEpsilonMustBeASmallPositiveNumber) {
  for (const char* preset : {"tiny-gpt2", "tiny-llama"}) {
    nlohmann::json j = model::config_to_hf_json(model::preset_config(preset));
    const std::string key = std::string(preset) == "tiny-gpt2" ? "layer_norm_epsilon" : "rms_norm_eps";
    ASSERT_TRUE(j.contains(key)) << j.dump();
    for (const double eps : {-1e-5, 0.0, 1e300}) {
      j[key] = eps;
      const std::string e = input_error_of([&] { model::config_from_hf_json(j, "/models/m/config.json"); });
      EXPECT_NE(e.find("/models/m/config.json"), std::string::npos) << e;
      EXPECT_NE(e.find(key), std::string::npos) << e;
    }
    j[key] = 1e-5;
    EXPECT_NO_THROW(model::config_from_hf_json(j, "config.json"));
  }
}

TEST(NonFinite, CheckpointShardWithNanIsNotLoadedNorConsolidated) {
  TempDir tmp;
  const model::ModelConfig config = zt::testing::small_llama_config();
  auto m = make_model(config, 1);
  checkpoint::CheckpointState st;
  st.step = 2;
  st.extra = {{"model_config", model::config_to_hf_json(config)}};
  const std::string dir = checkpoint::save_checkpoint(tmp.file("ckpts"), m->registry(),
                                                      checkpoint::whole_param_slices(m->registry()), st, {});
  zt::testing::poke_tensor(dir + "/shard_rank0.safetensors", "block.1.params", 9, kNaN);
  const std::string e = input_error_of(
      [&] { checkpoint::load_checkpoint(dir, m->registry(), checkpoint::whole_param_slices(m->registry())); });
  EXPECT_NE(e.find(dir + "/shard_rank0.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("'block.1.params'"), std::string::npos) << e;
  const std::string out = tmp.file("hf");
  const std::string c = input_error_of([&] { checkpoint::consolidate_checkpoint(dir, out, {}); });
  EXPECT_NE(c.find("'block.1.params'"), std::string::npos) << c;
  EXPECT_FALSE(fs::exists(out));
}

// A weight of 1e6 is finite (the checkpoint saves and loads) but f16's Inf: consolidate
// --dtype f16 refuses it, naming the parameter; f32 writes it.
TEST(NonFinite, ConsolidateRefusesAnOutputDtypeTheWeightsOverflow) {
  TempDir tmp;
  const model::ModelConfig config = zt::testing::small_llama_config();
  auto m = make_model(config, 1);
  m->registry().find("model.layers.0.mlp.down_proj.weight")->value.set_f32(3, 1e6f);
  checkpoint::CheckpointState st;
  st.step = 2;
  st.extra = {{"model_config", model::config_to_hf_json(config)}};
  const std::string dir = checkpoint::save_checkpoint(tmp.file("ckpts"), m->registry(),
                                                      checkpoint::whole_param_slices(m->registry()), st, {});
  checkpoint::ConsolidateOptions o;
  o.dtype = DType::F16;
  const std::string e = input_error_of([&] { checkpoint::consolidate_checkpoint(dir, tmp.file("f16"), o); });
  EXPECT_NE(e.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("overflows f16"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp.file("f16")));
  EXPECT_NO_THROW(checkpoint::consolidate_checkpoint(dir, tmp.file("f32"), {}));
}

// A save of non-finite parameters fails before anything is renamed into place: `latest`
// still names the previous checkpoint and keep_last has pruned nothing for it.
TEST(NonFinite, SaveRefusesNonFiniteWeightsAndKeepsTheEarlierCheckpoints) {
  TempDir tmp;
  auto m = make_model(zt::testing::small_llama_config(), 1);
  const std::string root = tmp.file("ckpts");
  checkpoint::CheckpointWriteOptions wo;
  wo.keep_last = 2;
  checkpoint::CheckpointState st;
  for (int64_t step : {1, 2}) {
    st.step = step;
    checkpoint::save_checkpoint(root, m->registry(), checkpoint::whole_param_slices(m->registry()), st, wo);
  }
  m->registry().find("model.norm.weight")->value.set_f32(0, kNaN);
  st.step = 3;
  try {
    checkpoint::save_checkpoint(root, m->registry(), checkpoint::whole_param_slices(m->registry()), st, wo);
    ADD_FAILURE() << "saved NaN weights";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("non-finite"), std::string::npos) << what;
    EXPECT_NE(what.find(".params'"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(root + "/global_step1/manifest.json"));
  EXPECT_TRUE(fs::exists(root + "/global_step2/manifest.json"));
  EXPECT_FALSE(fs::exists(root + "/global_step3"));
  EXPECT_FALSE(fs::exists(root + "/.global_step3.tmp"));
  EXPECT_EQ(checkpoint::resolve_checkpoint(root), root + "/global_step2");
}
