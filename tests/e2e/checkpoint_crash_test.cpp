// Crashes at exact points of a save (ZT_TEST_FAIL_AT, core/fail_point.h: the process
// SIGKILLs itself there, so no timing luck): after each, `latest` names a complete
// checkpoint, --resume latest finishes the run, final/ is one whole model and no
// temporary folder is left. Also: --resume auto falls back to the newest complete
// checkpoint, and a damaged manifest exits 2 naming the field (no SIGFPE, no exit 1).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/shell.h"
#include "common/tiny_run.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_validate.h"

namespace fs = std::filesystem;
using zt::testing::sh;
using zt::testing::ShellResult;

namespace {

// A 4-step tiny-gpt2 run on one license text, checkpoints at steps 2 and 4.
fs::path write_config(const fs::path& dir) { return zt::testing::write_tiny_run(dir, 2, 5); }

ShellResult train(const fs::path& yaml, const std::string& args, const std::string& env = "") {
  return zt::testing::train_tiny_run(yaml, args, env);
}

std::string latest_name(const fs::path& run) {
  std::ifstream in(run / "checkpoints" / "latest");
  std::string name;
  in >> name;
  return name;
}

// The invariants after any crash (and after the run that follows it).
void expect_latest_complete(const fs::path& run) {
  const std::string name = latest_name(run);
  ASSERT_FALSE(name.empty()) << "latest names nothing";
  std::string why;
  // resolve_checkpoint first puts back an aside checkpoint that `latest` names.
  const std::string dir = zt::checkpoint::resolve_checkpoint((run / "checkpoints").string());
  EXPECT_TRUE(zt::checkpoint::checkpoint_complete(dir, &why)) << why;
}

void expect_final_whole(const fs::path& run) {
  const fs::path f = run / "final";
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    EXPECT_TRUE(fs::is_regular_file(f / file)) << (f / file);
  EXPECT_NO_THROW(zt::io::SafetensorsReader((f / "model.safetensors").string()));
}

void expect_no_temporaries(const fs::path& run) {
  for (const fs::path& d : {run, run / "checkpoints"})
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string n = e.path().filename().string();
      EXPECT_TRUE(n.find(".tmp") == std::string::npos && n.find(".old") == std::string::npos &&
                  n.find(".del") == std::string::npos)
          << e.path();
    }
}

// SIGKILLed: the shell reports 128 + 9 (or sh() -1 for the shell itself killed).
bool killed(const ShellResult& r) { return r.rc == 137 || r.rc == -1; }

struct Scratch {
  fs::path path = zt::testing::build_temp_path("ckpt_crash_");
  Scratch() { fs::remove_all(path); }
  ~Scratch() { fs::remove_all(path); }
};

}  // namespace

// Resuming from step 2 of a finished run re-saves step 4, which `latest` names: killed at
// each point of that save (atomic exchange, and the rename-aside fallback).
TEST(CheckpointCrash, ResaveOfTheLatestStepKilledAtEachPoint) {
  ASSERT_TRUE(fs::exists(zt::testing::zerotrain_binary()));
  Scratch s;
  const fs::path base = s.path / "base";
  const fs::path yaml = write_config(base);
  ShellResult r = train(yaml, "");
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_EQ(latest_name(base / "run"), "global_step4");
  struct Case {
    const char* point;
    const char* env;
  };
  const std::vector<Case> cases = {
      {"checkpoint.shard_written@global_step4", ""},  {"checkpoint.manifest_written@global_step4", ""},
      {"replace.swapped@global_step4", ""},           {"replace.aside@global_step4", "ZT_TEST_NO_RENAME_EXCHANGE=1"},
      {"checkpoint.latest_written@global_step4", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.point);
    const fs::path dir = s.path / (std::string("case_") + std::to_string(&c - cases.data()));
    fs::copy(base, dir, fs::copy_options::recursive);
    const fs::path yaml_c = write_config(dir);
    const std::string step2 = (dir / "run" / "checkpoints" / "global_step2").string();
    r = train(yaml_c, "--resume " + step2, std::string("env ZT_TEST_FAIL_AT=") + c.point + " " + c.env);
    ASSERT_TRUE(killed(r)) << "not killed at " << c.point << ":\n" << r.out;
    ASSERT_NE(r.out.find("ZT_TEST_FAIL_AT"), std::string::npos) << r.out;
    expect_latest_complete(dir / "run");
    expect_final_whole(dir / "run");  // the first run's, untouched
    r = train(yaml_c, "--resume latest");
    ASSERT_EQ(r.rc, 0) << r.out;
    expect_latest_complete(dir / "run");
    expect_final_whole(dir / "run");
    expect_no_temporaries(dir / "run");
  }
}

// final/ killed before and after its swap: always one whole model; the next run's start
// removes the dead staging directory.
TEST(CheckpointCrash, FinalModelKilledAroundItsSwapStaysWhole) {
  ASSERT_TRUE(fs::exists(zt::testing::zerotrain_binary()));
  Scratch s;
  const fs::path yaml = write_config(s.path);
  ShellResult r = train(yaml, "");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* point : {"staging.before_swap@final", "replace.swapped@final"}) {
    SCOPED_TRACE(point);
    r = train(yaml, "--resume latest --max_steps 6", std::string("env ZT_TEST_FAIL_AT=") + point);
    ASSERT_TRUE(killed(r)) << r.out;
    expect_final_whole(s.path / "run");
    expect_latest_complete(s.path / "run");
  }
  r = train(yaml, "--resume latest --max_steps 6");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("left by an interrupted save"), std::string::npos) << r.out;
  expect_final_whole(s.path / "run");
  expect_no_temporaries(s.path / "run");
}

// --resume auto with `latest` missing, or naming a damaged checkpoint, resumes from the
// newest complete one and says so; --resume latest then exits 2 naming it.
TEST(CheckpointCrash, ResumeAutoFallsBackToTheNewestCompleteCheckpoint) {
  ASSERT_TRUE(fs::exists(zt::testing::zerotrain_binary()));
  Scratch s;
  const fs::path yaml = write_config(s.path);
  ShellResult r = train(yaml, "");
  ASSERT_EQ(r.rc, 0) << r.out;
  const fs::path ckpts = s.path / "run" / "checkpoints";
  std::ofstream(ckpts / "global_step4" / "manifest.json") << "{\"format\": \"zerotrain-checkpoint\"";
  r = train(yaml, "--resume latest");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("global_step2"), std::string::npos) << r.out;
  r = train(yaml, "--resume auto");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("newest complete checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from " + (ckpts / "global_step2").string()), std::string::npos) << r.out;
  fs::remove(ckpts / "latest");
  r = train(yaml, "--resume auto");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + (ckpts / "global_step4").string()), std::string::npos) << r.out;
}

// A damaged manifest stops --resume with exit 2 naming the file and field (world_size 0
// used to SIGFPE, padded_numel 0 to resume skipping the unit).
TEST(CheckpointCrash, DamagedManifestExitsTwoNamingTheField) {
  ASSERT_TRUE(fs::exists(zt::testing::zerotrain_binary()));
  Scratch s;
  const fs::path yaml = write_config(s.path);
  ShellResult r = train(yaml, "--max_steps 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  const fs::path manifest = s.path / "run" / "checkpoints" / "global_step2" / "manifest.json";
  nlohmann::json good;
  std::ifstream(manifest) >> good;
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"world_size", 0}, {"world_size", int64_t{1} << 40}, {"step", -1}};
  for (const auto& [key, value] : edits) {
    nlohmann::json m = good;
    m[key] = value;
    std::ofstream(manifest) << m.dump();
    r = train(yaml, "--resume latest --max_steps 4");
    EXPECT_EQ(r.rc, 2) << key << ": " << r.out;
    EXPECT_NE(r.out.find("manifest.json"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("'" + key + "'"), std::string::npos) << r.out;
  }
  // A manifest without the data position used to resume from position 0 with exit 0.
  for (const std::string field : {"data", "data.position"}) {
    nlohmann::json m = good;
    if (field == "data")
      m.erase("data");
    else
      m["data"].erase("position");
    std::ofstream(manifest) << m.dump();
    r = train(yaml, "--resume latest --max_steps 4");
    EXPECT_EQ(r.rc, 2) << field << ": " << r.out;
    EXPECT_NE(r.out.find(manifest.string()), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("'" + field + "' is missing"), std::string::npos) << r.out;
  }
  nlohmann::json m = good;
  m["units"][0]["padded_numel"] = 0;
  std::ofstream(manifest) << m.dump();
  r = train(yaml, "--resume " + manifest.parent_path().string() + " --max_steps 4");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("units[0].padded_numel"), std::string::npos) << r.out;
}
