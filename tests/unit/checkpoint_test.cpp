// Checkpoints: round trip, latest/keep_last, atomicity of a failed save, loading a
// checkpoint written by several ranks (re-cut at another world size), and clear errors
// for another model's checkpoint or a missing shard.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "common/small_models.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "checkpoint/checkpoint.h"
#include "io/output_file.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

model::ModelConfig small() { return zt::testing::small_llama_config(); }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::path(ZT_BINARY_DIR) / "test_tmp" /
           ("ckpt_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A fake optimizer state: one flat f32 tensor per unit.
struct FakeState {
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> named;
  FakeState(model::ParameterRegistry& reg, uint64_t seed) {
    for (auto& u : reg.units()) {
      owned.emplace_back(Shape{u->padded_numel()}, DType::F32);
      fill_normal(owned.back(), Philox(seed, owned.size()), 0.0f, 1.0f);
    }
    for (size_t i = 0; i < owned.size(); ++i) named.emplace_back(reg.unit(i).name() + ".exp_avg", owned[i].view());
    slices = checkpoint::whole_param_slices(reg);
    for (const auto& [name, t] : named) slices.push_back({name, t, 0});
  }
  std::vector<checkpoint::FlatSlice> slices;  // every unit's parameters and the fake state
};

bool same_bytes(const Tensor& a, const Tensor& b, int64_t n) {
  return std::memcmp(a.data(), b.data(), static_cast<size_t>(n) * dtype_size(a.dtype())) == 0;
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitwiseAndLatestPointsToNewest) {
  TempDir dir;
  model::Transformer a(small(), model::ModelOptions{}), b(small(), model::ModelOptions{});
  a.init_weights(1);
  b.init_weights(2);
  FakeState sa(a.registry(), 3), sb(b.registry(), 4);
  checkpoint::CheckpointState st;
  st.step = 7;
  st.data_epoch = 1;
  st.data_position = 99;
  st.loss_scaler = {{"scale", 1024.0}, {"hysteresis_left", 2}, {"clean_steps", 3}, {"skipped_steps", 1}};
  checkpoint::CheckpointWriteOptions wo;
  wo.keep_last = 2;
  checkpoint::save_checkpoint(dir.path.string(), a.registry(), sa.slices, st, wo);
  const std::string resolved = checkpoint::resolve_checkpoint(dir.path.string());
  EXPECT_EQ(fs::path(resolved).filename(), "global_step7");
  const checkpoint::CheckpointState got = checkpoint::load_checkpoint(resolved, b.registry(), sb.slices);
  EXPECT_EQ(got.step, 7);
  EXPECT_EQ(got.data_epoch, 1u);
  EXPECT_EQ(got.data_position, 99u);
  EXPECT_EQ(got.loss_scaler["scale"], 1024.0);
  for (size_t i = 0; i < a.registry().size(); ++i) {
    const auto& ua = a.registry().unit(i);
    EXPECT_TRUE(same_bytes(ua.flat_params(), b.registry().unit(i).flat_params(), ua.padded_numel())) << ua.name();
    EXPECT_TRUE(same_bytes(sa.named[i].second, sb.named[i].second, ua.padded_numel())) << ua.name();
  }
  // keep_last = 2: after steps 8 and 9, step 7 is gone and latest is 9.
  for (int64_t s : {8, 9}) {
    st.step = s;
    checkpoint::save_checkpoint(dir.path.string(), a.registry(), sa.slices, st, wo);
  }
  EXPECT_FALSE(fs::exists(dir.path / "global_step7"));
  EXPECT_TRUE(fs::exists(dir.path / "global_step8"));
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint(dir.path.string())).filename(), "global_step9");
}

TEST(Checkpoint, ShardsFromSeveralRanksLoadAtOneRank) {
  TempDir dir;
  model::ModelOptions four;
  four.shard_count = 4;
  model::Transformer a(small(), four), b(small(), model::ModelOptions{});
  a.init_weights(5);
  FakeState sa(a.registry(), 6), sb(b.registry(), 7);
  checkpoint::CheckpointState st;
  st.step = 3;
  checkpoint::CheckpointWriteOptions wo;
  wo.world_size = 4;
  for (int r = 3; r >= 0; --r) {  // rank 0 last: it writes the manifest and renames
    wo.rank = r;
    // In a real run all ranks write into one temp dir that rank 0 created and renames
    // (tests/comm covers that); here each rank saves into its own root: ranks > 0 find
    // the temp dir made for them and leave their shard there.
    const fs::path root = dir.path / ("r" + std::to_string(r));
    const fs::path tmp = checkpoint::checkpoint_staging_dir(root.string(), 3);
    if (r > 0) fs::create_directories(tmp);
    const std::string d = checkpoint::save_checkpoint(root.string(), a.registry(), sa.slices, st, wo);
    fs::create_directories(dir.path / "merged");
    for (const auto& e : fs::directory_iterator(r > 0 ? tmp : fs::path(d)))
      fs::copy(e.path(), dir.path / "merged" / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  checkpoint::load_checkpoint((dir.path / "merged").string(), b.registry(), sb.slices);
  for (size_t i = 0; i < a.registry().size(); ++i) {
    const auto& ua = a.registry().unit(i);
    EXPECT_TRUE(same_bytes(ua.flat_params(), b.registry().unit(i).flat_params(), ua.numel())) << ua.name();
    EXPECT_TRUE(same_bytes(sa.named[i].second, sb.named[i].second, ua.numel())) << ua.name();
  }
  // Without rank 2's shard the load names what is missing.
  fs::remove(dir.path / "merged" / "shard_rank2.safetensors");
  try {
    checkpoint::load_checkpoint((dir.path / "merged").string(), b.registry(), sb.slices);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(Checkpoint, AnotherModelsCheckpointIsRefused) {
  TempDir dir;
  model::Transformer a(small(), model::ModelOptions{});
  model::ModelConfig other = small();
  other.intermediate_size = 48;
  model::Transformer b(other, model::ModelOptions{});
  FakeState sa(a.registry(), 1), sb(b.registry(), 1);
  checkpoint::CheckpointState st;
  st.step = 1;
  checkpoint::save_checkpoint(dir.path.string(), a.registry(), sa.slices, st, {});
  EXPECT_THROW(checkpoint::load_checkpoint(checkpoint::resolve_checkpoint(dir.path.string()), b.registry(), sb.slices),
               Error);
}

TEST(Checkpoint, NoCheckpointGivesAClearError) {
  TempDir dir;
  try {
    checkpoint::resolve_checkpoint(dir.path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to resume from"), std::string::npos);
  }
}

TEST(Checkpoint, FailedSaveLeavesThePreviousCheckpointIntact) {
  TempDir dir;
  model::Transformer a(small(), model::ModelOptions{});
  FakeState sa(a.registry(), 1);
  checkpoint::CheckpointState st;
  st.step = 1;
  checkpoint::save_checkpoint(dir.path.string(), a.registry(), sa.slices, st, {});
  // An optimizer tensor that is not a flat per-unit buffer makes the save fail midway.
  OwnedTensor bad({3}, DType::F32);
  auto named = sa.slices;
  named.push_back({"head.bogus", bad.view(), 0});
  checkpoint::CheckpointWriteOptions wo;
  st.step = 2;
  EXPECT_THROW(checkpoint::save_checkpoint(dir.path.string(), a.registry(), named, st, wo), Error);
  EXPECT_FALSE(fs::exists(dir.path / "global_step2"));
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint(dir.path.string())).filename(), "global_step1");
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// Re-saving a step that exists (and that `latest` names) swaps the new directory in:
// afterwards `latest` names the new contents and nothing temporary is left, with the
// atomic exchange and with the rename-aside fallback of filesystems without it.
TEST(Checkpoint, ResavingAnExistingStepReplacesItWhole) {
  for (const bool exchange : {true, false}) {
    TempDir dir;
    if (!exchange) ::setenv("ZT_TEST_NO_RENAME_EXCHANGE", "1", 1);
    model::Transformer a(small(), model::ModelOptions{}), b(small(), model::ModelOptions{}),
        c(small(), model::ModelOptions{});
    a.init_weights(1);
    b.init_weights(2);
    checkpoint::CheckpointState st;
    st.step = 5;
    checkpoint::save_checkpoint(dir.path.string(), a.registry(), checkpoint::whole_param_slices(a.registry()), st, {});
    checkpoint::save_checkpoint(dir.path.string(), b.registry(), checkpoint::whole_param_slices(b.registry()), st, {});
    ::unsetenv("ZT_TEST_NO_RENAME_EXCHANGE");
    const std::string resolved = checkpoint::resolve_checkpoint(dir.path.string());
    checkpoint::load_checkpoint(resolved, c.registry(), checkpoint::whole_param_slices(c.registry()));
    for (size_t i = 0; i < b.registry().size(); ++i)
      EXPECT_TRUE(same_bytes(b.registry().unit(i).flat_params(), c.registry().unit(i).flat_params(),
                             b.registry().unit(i).numel()));
    for (const auto& e : fs::directory_iterator(dir.path)) {
      const std::string n = e.path().filename().string();
      EXPECT_TRUE(n == "latest" || n == "global_step5") << n;
    }
  }
}

// What dead runs' interrupted saves leave is removed at start; a re-save interrupted
// between rename-aside and rename-in is put back, since `latest` names it. Only marked
// folders go: a user's `.global_step7.old` without zerotrain's marker stays.
TEST(Checkpoint, StaleTemporariesAreRemovedAndAnAsideCheckpointPutBack) {
  TempDir dir;
  model::Transformer a(small(), model::ModelOptions{});
  checkpoint::CheckpointState st;
  st.step = 4;
  checkpoint::save_checkpoint(dir.path.string(), a.registry(), checkpoint::whole_param_slices(a.registry()), st, {});
  const auto marked = [&](const std::string& name, long pid) {
    fs::create_directories(dir.path / name);
    std::ofstream(dir.path / name / io::kStagingMarker) << "zerotrain staging folder\npid " << pid << "\n";
  };
  marked(".global_step4.old", 999999999);
  fs::rename(dir.path / "global_step4", dir.path / ".global_step4.old" / "dir");
  marked(".global_step6.tmp", 999999999);
  fs::create_directories(dir.path / ".global_step6.tmp" / "dir");
  marked("latest.tmp-999999999-0", 999999999);
  fs::create_directories(dir.path / ".global_step7.old" / "dir");  // the user's, unmarked
  std::ofstream(dir.path / ".global_step7.old" / "dir" / "notes") << "mine";
  const std::vector<std::string> removed = checkpoint::remove_stale_checkpoint_temps(dir.path.string());
  EXPECT_EQ(removed.size(), 3u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"latest", "global_step4", ".global_step7.old"}));
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint(dir.path.string())).filename(), "global_step4");
}

// --resume auto: `latest` missing or naming a damaged checkpoint falls back to the newest
// complete one; --resume latest refuses, naming it.
TEST(Checkpoint, AutoPicksTheNewestCompleteCheckpointWhenLatestIsBad) {
  TempDir dir;
  model::Transformer a(small(), model::ModelOptions{});
  checkpoint::CheckpointState st;
  for (const int64_t step : {2, 4, 6}) {
    st.step = step;
    checkpoint::save_checkpoint(dir.path.string(), a.registry(), checkpoint::whole_param_slices(a.registry()), st, {});
  }
  std::ofstream(dir.path / "global_step6" / "manifest.json") << "{";
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint_auto(dir.path.string())).filename(), "global_step4");
  try {
    checkpoint::resolve_checkpoint(dir.path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("global_step4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--resume auto"), std::string::npos) << e.what();
  }
  fs::remove(dir.path / "latest");
  EXPECT_EQ(fs::path(checkpoint::resolve_checkpoint_auto(dir.path.string())).filename(), "global_step4");
  fs::remove_all(dir.path / "global_step4");
  fs::remove_all(dir.path / "global_step2");
  EXPECT_EQ(checkpoint::resolve_checkpoint_auto(dir.path.string()), "");
}
