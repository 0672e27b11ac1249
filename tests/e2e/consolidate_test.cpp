// `zerotrain consolidate` from the shell: a training checkpoint becomes an HF directory
// whose weights are bitwise the trained ones (f32 run: the final model; bf16 run: the fp32
// master weights), shards saved by several ranks are joined (padding dropped), and bad
// input (a missing shard, another model's manifest, no model config) exits 2 naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/small_run.h"
#include "common/shell.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "checkpoint/checkpoint.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Result = zt::testing::ShellResult;
using zt::testing::sh;

std::string binary() { return std::string(ZT_BINARY_DIR) + "/zerotrain"; }

Result consolidate(const std::string& args) { return sh(binary() + " consolidate " + args); }

// This file's per-test scratch directory: build/test_tmp/consolidate_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("consolidate_")) {}
};

// The leading hf_shape rows of a parameter (what HF files hold; vocab padding dropped).
Tensor hf_rows(const model::ParamEntry& e) { return e.value.narrow(0, 0, e.spec.hf_shape[0]); }

// Every parameter of `a` has the same bytes in `b` (HF rows only; both f32).
void expect_same_weights(const model::ParameterRegistry& a, model::ParameterRegistry& b) {
  int64_t compared = 0;
  a.for_each([&](const model::Unit&, const model::ParamEntry& e) {
    const model::ParamEntry* other = b.find(e.name());
    ASSERT_NE(other, nullptr) << e.name();
    const Tensor x = hf_rows(e), y = hf_rows(*other);
    ASSERT_EQ(x.shape(), y.shape()) << e.name();
    ASSERT_EQ(x.dtype(), y.dtype()) << e.name();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << e.name() << " differs";
    ++compared;
  });
  EXPECT_GT(compared, 0);
}

// A checkpoint as `world_size` ranks save it, simulated in one process: each rank saves
// into its own root (a shared temporary directory would be renamed away by rank 0 before
// the others wrote into it), then every shard is copied next to rank 0's manifest.
struct ShardedCheckpoint {
  std::unique_ptr<model::Transformer> model;
  fs::path root;  // rank 0's checkpoint root (holds `latest`)
  fs::path dir;   // root/global_step5: the manifest and every rank's shard
};

// Rank r's shard file wherever save_checkpoint left it under `root` (its step directory,
// or the temporary directory that only rank 0 renames).
fs::path find_shard(const fs::path& root, int rank) {
  const std::string name = "shard_rank" + std::to_string(rank) + ".safetensors";
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename() == name) return e.path();
  ADD_FAILURE() << "no " << name << " under " << root;
  return {};
}

ShardedCheckpoint save_sharded(const fs::path& where, const model::ModelConfig& config, int world_size) {
  ShardedCheckpoint c;
  model::ModelOptions mo;
  mo.shard_count = world_size;
  mo.allocate_grads = false;
  c.model = std::make_unique<model::Transformer>(config, mo);
  c.model->init_weights(11);
  // Optimizer moments that consolidation must never need: huge values it would show.
  std::vector<OwnedTensor> moments;
  std::vector<checkpoint::FlatSlice> slices = checkpoint::whole_param_slices(c.model->registry());
  moments.reserve(c.model->registry().size());
  for (const auto& u : c.model->registry().units()) {
    moments.emplace_back(Shape{u->padded_numel()}, DType::F32);
    moments.back().view().fill_f32(1e30f);
    slices.push_back({u->name() + ".exp_avg", moments.back().view(), 0});
  }
  checkpoint::CheckpointState st;
  st.step = 5;
  st.extra = {{"model_config", model::config_to_hf_json(config)}};
  checkpoint::CheckpointWriteOptions wo;
  wo.world_size = world_size;
  c.root = where / "rank0";
  for (int r = world_size - 1; r >= 0; --r) {  // rank 0 last: it renames and writes `latest`
    wo.rank = r;
    const fs::path root = where / ("rank" + std::to_string(r));
    // Without a communicator, ranks > 0 write into the temporary directory rank 0 makes.
    if (r > 0) fs::create_directories(checkpoint::checkpoint_staging_dir(root.string(), 5));
    const std::string d = checkpoint::save_checkpoint(root.string(), c.model->registry(), slices, st, wo);
    if (r == 0) c.dir = d;
  }
  for (int r = 1; r < world_size; ++r) {
    const fs::path shard = find_shard(where / ("rank" + std::to_string(r)), r);
    fs::copy_file(shard, c.dir / shard.filename());
  }
  return c;
}

void rewrite_manifest(const fs::path& dir, const std::function<void(json&)>& edit) {
  json m;
  std::ifstream(dir / "manifest.json") >> m;
  edit(m);
  std::ofstream(dir / "manifest.json") << m.dump(2);
}

}  // namespace

TEST(ConsolidateCli, F32RunEqualsTheFinalModelBitwise) {
  ASSERT_TRUE(fs::exists(binary())) << "build the zerotrain target first";
  TempDir dir;
  const train::TrainResult run = train::run_training(zt::testing::small_run(dir.path()));
  ASSERT_EQ(run.steps, 6);
  const fs::path root = dir.path() / "run" / "checkpoints";  // `latest` names global_step6
  const fs::path tokenizer = dir.path() / "run" / "tokenizer.json";
  ASSERT_TRUE(fs::exists(tokenizer));
  const std::string out = dir.file("hf");
  const Result r = consolidate(root.string() + " " + out + " --tokenizer " + tokenizer.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("[1/6] embed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("global_step6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.json"));

  const model::Pretrained ours = model::load_pretrained(out);
  const model::Pretrained final_model = model::load_pretrained(run.final_model_dir);
  expect_same_weights(final_model.model->registry(), ours.model->registry());
  // The same writer at the same step: the weight files are the same bytes.
  EXPECT_EQ(zt::testing::file_bytes(fs::path(run.final_model_dir) / "model.safetensors"),
            zt::testing::file_bytes(fs::path(out) / "model.safetensors"));
}

TEST(ConsolidateCli, ShardsOfSeveralRanksAreJoined) {
  ASSERT_TRUE(fs::exists(binary())) << "build the zerotrain target first";
  TempDir dir;
  // Llama at 2 ranks; GPT-2 at 3 ranks, where units have padding past their elements.
  const std::vector<std::pair<std::string, int>> cases = {{"tiny-llama", 2}, {"tiny-gpt2", 3}};
  for (const auto& [preset, world_size] : cases) {
    SCOPED_TRACE(preset + " at " + std::to_string(world_size) + " ranks");
    const fs::path where = dir.path() / preset;
    const ShardedCheckpoint c = save_sharded(where, model::preset_config(preset), world_size);
    const std::string out = (where / "hf").string();
    // A small --max-shard-size: the HF directory is sharded with an index.
    const Result r = consolidate(c.root.string() + " " + out + " --max-shard-size 100KB");
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(std::to_string(world_size) + " ranks"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(fs::path(out) / "model.safetensors.index.json"));
    const model::Pretrained ours = model::load_pretrained(out);
    expect_same_weights(c.model->registry(), ours.model->registry());
  }
}

TEST(ConsolidateCli, Bf16RunGivesTheMasterWeights) {
  ASSERT_TRUE(fs::exists(binary())) << "build the zerotrain target first";
  TempDir dir;
  const train::TrainResult run =
      train::run_training(zt::testing::small_run(dir.path(), {"--bf16", "true", "--max_steps", "3"}));
  ASSERT_EQ(run.steps, 3);
  const fs::path ckpt = dir.path() / "run" / "checkpoints" / "global_step3";
  const std::string out32 = dir.file("hf32"), out16 = dir.file("hf16");
  Result r = consolidate(ckpt.string() + " " + out32 + " --dtype f32");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("from master"), std::string::npos) << r.out;

  // The f32 output is the shard's fp32 master weights, element for element.
  const model::Pretrained ours = model::load_pretrained(out32);
  const io::SafetensorsReader shard((ckpt / "shard_rank0.safetensors").string());
  int64_t differs_from_bf16 = 0;
  ours.model->registry().for_each([&](const model::Unit& u, const model::ParamEntry& e) {
    const Tensor master = shard.tensor(u.name() + ".master");
    const Tensor params = shard.tensor(u.name() + ".params");
    const Tensor got = hf_rows(e);
    const int64_t n = got.numel();
    EXPECT_EQ(std::memcmp(got.data(), master.narrow(0, e.offset, n).data(), got.nbytes()), 0) << e.name();
    for (int64_t i = 0; i < n; ++i) differs_from_bf16 += got.get_f32(i) != params.get_f32(e.offset + i);
  });
  EXPECT_GT(differs_from_bf16, 0) << "the master weights should carry more precision than the bf16 parameters";

  // In the run's own dtype it is the final model (written in bf16 at the same step).
  r = consolidate(ckpt.string() + " " + out16 + " --dtype bf16 --quiet");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("[1/"), std::string::npos) << r.out;
  EXPECT_EQ(zt::testing::file_bytes(fs::path(run.final_model_dir) / "model.safetensors"),
            zt::testing::file_bytes(fs::path(out16) / "model.safetensors"));
}

TEST(ConsolidateCli, BadInputExitsTwoNamingTheProblem) {
  ASSERT_TRUE(fs::exists(binary())) << "build the zerotrain target first";
  TempDir dir;
  const model::ModelConfig config = model::preset_config("tiny-gpt2");
  const ShardedCheckpoint c = save_sharded(dir.path() / "ckpt", config, 2);
  const std::string out = dir.file("hf");

  // Not a checkpoint.
  Result r = consolidate(dir.file("nothing") + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("not a checkpoint"), std::string::npos) << r.out;

  // A manifest of another model: a parameter's shape edited.
  const fs::path other = dir.path() / "other";
  fs::copy(c.dir, other, fs::copy_options::recursive);
  rewrite_manifest(other, [](json& m) { m["units"][1]["params"][0]["shape"] = {1}; });
  r = consolidate(other.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("another model"), std::string::npos) << r.out;

  // No model config in the manifest: --config supplies it.
  const fs::path bare = dir.path() / "bare";
  fs::copy(c.dir, bare, fs::copy_options::recursive);
  rewrite_manifest(bare, [](json& m) { m["extra"].erase("model_config"); });
  r = consolidate(bare.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--config"), std::string::npos) << r.out;
  const std::string config_json = dir.write("config.json", model::config_to_hf_json(config).dump());
  r = consolidate(bare.string() + " " + out + " --config " + config_json);
  EXPECT_EQ(r.rc, 0) << r.out;
  fs::remove_all(out);

  // A missing shard: names the rank and the file; nothing is written.
  fs::remove(c.dir / "shard_rank1.safetensors");
  r = consolidate(c.dir.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shard_rank1.safetensors"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));

  // Flags.
  r = consolidate(c.dir.string() + " " + out + " --dtype i32");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = consolidate(c.dir.string());
  EXPECT_EQ(r.rc, 2) << r.out;
}

// consolidate shares resume's validator: a damaged field or a shard tensor of the wrong
// dtype exits 2 naming the file and field (world_size 0 must not divide).
TEST(ConsolidateCli, DamagedManifestFieldsExitTwoNamingTheField) {
  ASSERT_TRUE(fs::exists(binary())) << "build the zerotrain target first";
  TempDir dir;
  const ShardedCheckpoint c = save_sharded(dir.path() / "ckpt", model::preset_config("tiny-gpt2"), 2);
  const std::string out = dir.file("hf");
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"world_size", 0}, {"world_size", int64_t{1} << 40}, {"step", -3}}) {
    const fs::path bad = dir.path() / ("bad_" + field + value.dump());
    fs::copy(c.dir, bad, fs::copy_options::recursive);
    rewrite_manifest(bad, [&, f = field, v = value](json& m) { m[f] = v; });
    const Result r = consolidate(bad.string() + " " + out);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("manifest.json"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("'" + field + "'"), std::string::npos) << r.out;
  }
  const fs::path bad = dir.path() / "bad_padded";
  fs::copy(c.dir, bad, fs::copy_options::recursive);
  rewrite_manifest(bad, [](json& m) { m["units"][0]["padded_numel"] = 0; });
  const Result r = consolidate(bad.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("units[0].padded_numel"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}
