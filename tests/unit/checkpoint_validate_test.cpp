// The checkpoint validator (checkpoint/checkpoint_validate.h): every damaged manifest field and
// wrong shard tensor is BadInput (exit 2) naming the file and the field, before anything
// divides by it or allocates from it; resume (load_checkpoint) and consolidate share it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/small_models.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_validate.h"

using namespace zt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Fixture {
  fs::path root;
  model::Transformer model{zt::testing::small_llama_config(), model::ModelOptions{}};
  std::string dir;
  Fixture() {
    root = zt::testing::build_temp_path("ckpt_validate_");
    fs::remove_all(root);
    fs::create_directories(root);
    model.init_weights(1);
    checkpoint::CheckpointState st;
    st.step = 3;
    dir = checkpoint::save_checkpoint(root.string(), model.registry(), checkpoint::whole_param_slices(model.registry()),
                                      st, {});
  }
  ~Fixture() { fs::remove_all(root); }

  void edit_manifest(const std::function<void(json&)>& edit) const {
    const fs::path p = fs::path(dir) / "manifest.json";
    json j;
    std::ifstream(p) >> j;
    edit(j);
    std::ofstream(p) << j.dump(2);
  }

  // load_checkpoint's error: BadInput whose message holds every one of `words`.
  void expect_bad_input(const std::vector<std::string>& words) const {
    try {
      checkpoint::load_checkpoint(dir, model.registry(), checkpoint::whole_param_slices(model.registry()));
      ADD_FAILURE() << "loaded a bad checkpoint";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
      for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
    // The shared reader gives the same verdict (consolidate's path) for manifest problems.
  }
};

}  // namespace

TEST(CheckpointValidate, AGoodCheckpointValidates) {
  Fixture f;
  std::string why;
  EXPECT_TRUE(checkpoint::checkpoint_complete(f.dir, &why)) << why;
  const checkpoint::CheckpointManifest m = checkpoint::read_checkpoint_manifest(f.dir);
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.world_size, 1);
  EXPECT_EQ(m.units.size(), f.model.registry().size());
}

TEST(CheckpointValidate, WorldSizeZeroOrHugeIsRefusedNotDividedBy) {
  for (const json& ws : {json(0), json(int64_t{1} << 40), json(-1), json("2"), json(1.5)}) {
    Fixture f;
    f.edit_manifest([&](json& j) { j["world_size"] = ws; });
    f.expect_bad_input({"manifest.json", "world_size"});
  }
}

TEST(CheckpointValidate, PaddedNumelZeroOrWrongIsRefused) {
  for (const int64_t padded : {int64_t{0}, int64_t{-5}, int64_t{1}}) {
    Fixture f;
    f.edit_manifest([&](json& j) { j["units"][1]["padded_numel"] = padded; });
    f.expect_bad_input({"manifest.json", "units[1].padded_numel"});
  }
}

TEST(CheckpointValidate, NegativeStepAndCountersAreRefused) {
  {
    Fixture f;
    f.edit_manifest([](json& j) { j["step"] = -4; });
    f.expect_bad_input({"manifest.json", "'step'"});
  }
  {
    Fixture f;
    f.edit_manifest([](json& j) { j["micro_steps"] = -1; });
    f.expect_bad_input({"micro_steps"});
  }
  {
    Fixture f;
    f.edit_manifest([](json& j) { j["data"]["position"] = -1; });
    f.expect_bad_input({"data.position"});
  }
}

TEST(CheckpointValidate, MalformedManifestsNameTheFieldNotInternalError) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j.erase("units"); }, "'units' is missing"},
      {[](json& j) { j["units"] = 7; }, "'units' must be an array"},
      {[](json& j) { j["units"][0].erase("numel"); }, "units[0].numel"},
      {[](json& j) { j["units"][0]["name"] = 3; }, "units[0].name"},
      {[](json& j) { j["units"][0]["params"][0]["offset"] = -1; }, "units[0].params[0].offset"},
      {[](json& j) {
         j["units"][0]["params"][0]["shape"] = {1 << 30, 1 << 30};
       },
       "units[0].params[0]"},
      {[](json& j) { j["units"][0]["params"][0]["shape"] = "x"; }, "units[0].params[0].shape"},
      {[](json& j) { j["optimizer_state"] = {"nounit.exp_avg"}; }, "optimizer_state[0]"},
      {[](json& j) {
         j["loss_scaler"] = {{"scale", -1.0}};
       },
       "loss_scaler.scale"},
      {[](json& j) {
         j["loss_scaler"] = {{"scale", 8.0}};
       },
       "loss_scaler.hysteresis_left"},
      {[](json& j) { j["param_dtype"] = "i32"; }, "param_dtype"},
      {[](json& j) { j["version"] = 99; }, "version"},
      {[](json& j) { j["extra"] = "x"; }, "'extra'"},
      {[](json& j) { j["extra"]["optimizer_steps"] = 10; }, "extra.optimizer_steps"},
  };
  for (const auto& [edit, field] : cases) {
    Fixture f;
    f.edit_manifest(edit);
    SCOPED_TRACE(field);
    f.expect_bad_input({"manifest.json", field});
  }
}

// Every field a resume restores is required (version 1 always wrote them): a manifest
// without the data position used to resume from position 0, on other data, with exit 0.
TEST(CheckpointValidate, EveryFieldResumeRestoresIsRequired) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j.erase("data"); }, "'data' is missing"},
      {[](json& j) { j["data"].erase("position"); }, "'data.position' is missing"},
      {[](json& j) { j["data"].erase("epoch"); }, "'data.epoch' is missing"},
      {[](json& j) { j["data"] = 16; }, "'data' must be an object"},
      {[](json& j) { j.erase("seed"); }, "'seed' is missing"},
      {[](json& j) { j.erase("micro_steps"); }, "'micro_steps' is missing"},
      {[](json& j) { j.erase("zero_stage"); }, "'zero_stage' is missing"},
      {[](json& j) { j.erase("param_dtype"); }, "'param_dtype' is missing"},
      {[](json& j) { j.erase("optimizer_state"); }, "'optimizer_state' is missing"},
      {[](json& j) { j.erase("loss_scaler"); }, "'loss_scaler' is missing"},
      {[](json& j) { j.erase("version"); }, "'version' is missing"},
      {[](json& j) { j.erase("extra"); }, "'extra' is missing"},
  };
  for (const auto& [edit, field] : cases) {
    Fixture f;
    f.edit_manifest(edit);
    SCOPED_TRACE(field);
    f.expect_bad_input({"manifest.json", field});
    EXPECT_FALSE(checkpoint::checkpoint_complete(f.dir));  // --resume auto passes over it
  }
  // extra.optimizer_steps came later: a manifest without it loads (steps = updates).
  Fixture f;
  f.edit_manifest([](json& j) { j["extra"] = json::object(); });
  EXPECT_NO_THROW(
      checkpoint::load_checkpoint(f.dir, f.model.registry(), checkpoint::whole_param_slices(f.model.registry())));
}

TEST(CheckpointValidate, TruncatedManifestIsBadInput) {
  Fixture f;
  std::ofstream(fs::path(f.dir) / "manifest.json") << "{\"format\": \"zerotrain-checkpoint\", \"units\": [";
  f.expect_bad_input({"manifest.json", "not valid JSON"});
  EXPECT_FALSE(checkpoint::checkpoint_complete(f.dir));
}

// A shard tensor of another dtype (I32) or length must be refused, never converted.
TEST(CheckpointValidate, ShardTensorOfWrongDtypeOrShapeIsRefused) {
  for (const bool wrong_dtype : {true, false}) {
    Fixture f;
    const std::string shard = (fs::path(f.dir) / "shard_rank0.safetensors").string();
    std::vector<io::TensorSource> sources;
    std::vector<OwnedTensor> keep;
    {
      const io::SafetensorsReader rd(shard);
      for (const auto& u : f.model.registry().units()) {
        const std::string name = u->name() + ".params";
        const int64_t n = wrong_dtype || name != "embed.params" ? u->padded_numel() : u->padded_numel() - 1;
        const DType dt = wrong_dtype && name == "embed.params" ? DType::I32 : DType::F32;
        keep.emplace_back(Shape{n}, dt);
        const Tensor t = keep.back().view();
        std::memset(t.data(), 0, t.nbytes());
        sources.push_back({name, dt, Shape{n}, [t](void* dst) { std::memcpy(dst, t.data(), t.nbytes()); }});
      }
    }
    io::write_safetensors(shard, sources, {{"format", "zerotrain-checkpoint"}});
    f.expect_bad_input({"shard_rank0.safetensors", "embed.params", wrong_dtype ? "I32" : "["});
  }
}

TEST(CheckpointValidate, MissingShardNamesTheRank) {
  Fixture f;
  f.edit_manifest([&](json& j) {
    j["world_size"] = 2;
    for (json& u : j["units"]) u["padded_numel"] = (u["numel"].get<int64_t>() + 1) / 2 * 2;
  });
  f.expect_bad_input({"rank 1", "shard_rank1.safetensors"});
  EXPECT_FALSE(checkpoint::checkpoint_complete(f.dir));
}

// A shard cut short (a copy that stopped, a full disk) is present but not whole: the
// checkpoint is not complete, so `--resume auto` falls back past it with a warning naming
// it, and `--resume latest` refuses it naming the shard.
TEST(CheckpointValidate, TruncatedShardIsIncompleteAndAutoFallsBackPastIt) {
  Fixture f;
  checkpoint::CheckpointState st;
  st.step = 5;
  const std::string newer = checkpoint::save_checkpoint(f.root.string(), f.model.registry(),
                                                        checkpoint::whole_param_slices(f.model.registry()), st, {});
  const fs::path shard = fs::path(newer) / "shard_rank0.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  std::string why;
  EXPECT_FALSE(checkpoint::checkpoint_complete(newer, &why));
  EXPECT_NE(why.find("shard_rank0.safetensors"), std::string::npos) << why;
  EXPECT_TRUE(checkpoint::checkpoint_complete(f.dir));
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint_auto(f.root.string())).filename(), "global_step3");
  try {
    checkpoint::resolve_checkpoint(f.root.string());
    ADD_FAILURE() << "--resume latest took a truncated checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("global_step5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("global_step3"), std::string::npos) << e.what();
  }
}
