// HF TrainingArguments fields without a run key (config/hf_training_args.h): silent at HF's
// default, a warning when set to something else, exit 2 for those that would change what is
// trained; none of them shadows a run key or alias; a run file holding them loads.
#include "config/hf_training_args.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "config/config_keys.h"
#include "config/run_config.h"
#include "core/error.h"

namespace zt::config {
namespace {

using nlohmann::json;

TEST(HfTrainingArgs, NoFieldIsAlsoARunKeyOrAlias) {
  std::set<std::string> run_names;
  for (const RunKey& k : run_keys()) {
    run_names.insert(k.key);
    for (const std::string& a : k.aliases) run_names.insert(a);
  }
  std::set<std::string> seen;
  for (const HfTrainingArg& a : hf_training_args()) {
    EXPECT_EQ(run_names.count(a.name), 0u) << a.name << " is a run key: the run table reads it";
    EXPECT_TRUE(seen.insert(a.name).second) << a.name << " twice";
    EXPECT_FALSE(a.why.empty()) << a.name;
  }
}

TEST(HfTrainingArgs, DefaultsAreSilentOthersWarnOrRefuse) {
  const Where top{"args.json", ""};
  std::vector<std::string> warnings;
  json doc = {{"torch_compile", false}, {"push_to_hub", false}, {"hub_model_id", nullptr},
              {"ddp_timeout", 1800},    {"fsdp", ""},           {"learning_rate", 1e-4}};
  take_hf_training_args(doc, top, warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(doc, json({{"learning_rate", 1e-4}}));  // run keys stay for the run table

  doc = {{"torch_compile", true}, {"dataloader_pin_memory", false}};
  take_hf_training_args(doc, top, warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("args.json: torch_compile = true: accepted, no effect here"), std::string::npos)
      << warnings[0];
  EXPECT_TRUE(doc.empty());

  for (const char* refused : {"label_smoothing_factor", "neftune_noise_alpha", "fsdp", "push_to_hub", "use_cpu"}) {
    json bad = {{refused, std::string(refused) == "fsdp" ? json("full_shard") : json(true)}};
    if (std::string(refused) == "label_smoothing_factor" || std::string(refused) == "neftune_noise_alpha")
      bad = {{refused, 0.1}};
    try {
      take_hf_training_args(bad, top, warnings);
      FAIL() << refused << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(std::string("args.json: ") + refused), std::string::npos) << e.what();
    }
  }
}

// Through the loader: a run file with TrainingArguments as users keep them loads with one
// warning per field that is off its default; the command line takes them too.
TEST(HfTrainingArgs, ARunFileAndTheCommandLineCarryThem) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("hf_training_args_"));
  const std::string run = dir.write("args.yaml",
                                    "learning_rate: 2.0e-4\npush_to_hub: false\ntorch_compile: true\n"
                                    "ddp_find_unused_parameters: false\nreport_to: none\ndo_train: true\n");
  const TrainConfig c = load_train_config({run, "--dataloader_pin_memory", "false"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 2e-4f);
  std::vector<std::string> named;
  for (const std::string& w : c.warnings)
    for (const char* k : {"torch_compile", "ddp_find_unused_parameters", "do_train", "dataloader_pin_memory"})
      if (w.find(k) != std::string::npos) named.push_back(k);
  EXPECT_EQ(named.size(), 4u);
  try {
    load_train_config({run, "--neftune_noise_alpha", "5"});
    FAIL() << "neftune_noise_alpha was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neftune_noise_alpha"), std::string::npos) << e.what();
  }
}

TEST(HfTrainingArgs, TheDocsListIsTheTable) {
  const std::string md = hf_training_args_markdown();
  for (const HfTrainingArg& a : hf_training_args()) EXPECT_NE(md.find("| `" + a.name + "` |"), std::string::npos);
}

}  // namespace
}  // namespace zt::config
