// LoraConfig: PEFT's adapter_config.json read and written (keys, defaults, refusals of
// what changes the math), and target_modules resolved against each family's linears.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/input_error.h"
#include "core/error.h"
#include "model/config.h"
#include "model/lora_config.h"

using namespace zt;
using namespace zt::model;
using json = nlohmann::json;

namespace {

// What PEFT 0.17's save_pretrained writes for LoraConfig(r=16, lora_alpha=32,
// target_modules=["q_proj", "v_proj"], lora_dropout=0.05, task_type="CAUSAL_LM").
json peft_017_file() {
  return json::parse(R"({
  "alpha_pattern": {}, "auto_mapping": null, "base_model_name_or_path": "meta-llama/Llama-3.2-1B",
  "bias": "none", "corda_config": null, "eva_config": null, "exclude_modules": null,
  "fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true,
  "layer_replication": null, "layers_pattern": null, "layers_to_transform": null,
  "loftq_config": {}, "lora_alpha": 32, "lora_bias": false, "lora_dropout": 0.05,
  "megatron_config": null, "megatron_core": "megatron.core", "modules_to_save": null,
  "peft_type": "LORA", "qalora_group_size": 16, "r": 16, "rank_pattern": {}, "revision": null,
  "target_modules": ["q_proj", "v_proj"], "target_parameters": null, "task_type": "CAUSAL_LM",
  "trainable_token_indices": null, "use_dora": false, "use_qalora": false, "use_rslora": false})");
}

std::string error_of(const std::function<void()>& fn) { return zt::testing::input_error_of(fn); }

std::string parse_error(json j) {
  return error_of([&] { lora_config_from_peft_json(j, "adapter_config.json"); });
}

ModelConfig llama() {
  ModelConfig m = preset_config("tiny-llama");
  return m;
}

}  // namespace

TEST(LoraConfig, ReadsPeftFile) {
  const LoraConfig c = lora_config_from_peft_json(peft_017_file(), "f");
  EXPECT_EQ(c.r, 16);
  EXPECT_EQ(c.lora_alpha, 32);
  EXPECT_DOUBLE_EQ(c.lora_dropout, 0.05);
  EXPECT_EQ(c.target_form, LoraTargetForm::Names);
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.bias, LoraBias::None);
  EXPECT_EQ(c.base_model_name_or_path, "meta-llama/Llama-3.2-1B");
  EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
}

// PEFT 0.17's file without the keys PEFT 0.12 does not know (0.12 raises a TypeError on
// them; later versions default what is missing): what zerotrain writes.
json peft_012_keys_of(json j) {
  for (const char* newer : {"corda_config", "eva_config", "exclude_modules", "lora_bias", "qalora_group_size",
                            "target_parameters", "trainable_token_indices", "use_qalora"})
    j.erase(newer);
  return j;
}

TEST(LoraConfig, WritesWhatPeftWrites) {
  const LoraConfig c = lora_config_from_peft_json(peft_017_file(), "f");
  EXPECT_EQ(lora_config_to_peft_json(c), peft_012_keys_of(peft_017_file()));
  // and what it writes reads back to the same config, for every non-default setting
  LoraConfig d;
  d.r = 4;
  d.lora_alpha = 6.5;
  d.target_form = LoraTargetForm::AllLinear;
  d.bias = LoraBias::LoraOnly;
  d.use_rslora = true;
  d.init_lora_weights = LoraInit::Gaussian;
  d.modules_to_save = {"lm_head"};
  d.fan_in_fan_out = true;
  const LoraConfig back = lora_config_from_peft_json(lora_config_to_peft_json(d), "f");
  EXPECT_EQ(back.r, 4);
  EXPECT_EQ(back.lora_alpha, 6.5);
  EXPECT_EQ(back.target_form, LoraTargetForm::AllLinear);
  EXPECT_EQ(back.bias, LoraBias::LoraOnly);
  EXPECT_TRUE(back.use_rslora);
  EXPECT_EQ(back.init_lora_weights, LoraInit::Gaussian);
  EXPECT_EQ(back.modules_to_save, d.modules_to_save);
  EXPECT_TRUE(back.fan_in_fan_out);
  EXPECT_DOUBLE_EQ(back.scaling(), 6.5 / 2.0);
  EXPECT_TRUE(lora_config_to_peft_json(d)["base_model_name_or_path"].is_null());
}

TEST(LoraConfig, RefusesWhatChangesTheMath) {
  const std::vector<std::pair<std::string, json>> refused = {
      {"use_dora", true},
      {"layers_to_transform", json::array({0, 1})},
      {"rank_pattern", json{{"q_proj", 8}}},
      {"alpha_pattern", json{{"q_proj", 8}}},
      {"target_parameters", json::array({"experts.weight"})},
      {"lora_bias", true},
      {"init_lora_weights", "pissa"},
      {"init_lora_weights", false},
      {"some_future_key", 3},
  };
  for (const auto& [key, value] : refused) {
    json j = peft_017_file();
    j[key] = value;
    EXPECT_NE(parse_error(j).find(key), std::string::npos) << key;
  }
  // inert keys and a newer PEFT's defaults are accepted
  json j = peft_017_file();
  j["peft_version"] = "0.19.1";
  j["inference_mode"] = false;
  j["some_future_key"] = nullptr;
  j.erase("task_type");
  EXPECT_NO_THROW(lora_config_from_peft_json(j, "f"));
}

TEST(LoraConfig, RefusesOtherAdapterTypesAndBadValues) {
  json j = peft_017_file();
  j["peft_type"] = "IA3";
  EXPECT_NE(parse_error(j).find("peft_type"), std::string::npos);
  j = peft_017_file();
  j["task_type"] = "SEQ_CLS";
  EXPECT_NE(parse_error(j).find("task_type"), std::string::npos);
  j = peft_017_file();
  j["r"] = 0;
  EXPECT_NE(parse_error(j).find("r must be"), std::string::npos);
  j = peft_017_file();
  j["bias"] = "some";
  EXPECT_NE(parse_error(j).find("bias"), std::string::npos);
  j = peft_017_file();
  j["target_modules"] = nullptr;
  EXPECT_NE(parse_error(j).find("target_modules"), std::string::npos);
}

TEST(LoraTargets, LlamaModulesAndRows) {
  const ModelConfig m = llama();
  LoraConfig c;
  c.target_modules = {"v_proj", "q_proj", "down_proj"};
  const auto t = resolve_lora_targets(c, m, "f");
  ASSERT_EQ(t.size(), 3u);  // model order
  EXPECT_EQ(t[0].name, "self_attn.q_proj");
  EXPECT_EQ(t[1].name, "self_attn.v_proj");
  EXPECT_EQ(t[2].name, "mlp.down_proj");
  const int64_t q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
  EXPECT_EQ(t[1].field, Field::QkvWeight);
  EXPECT_EQ(t[1].row_begin, q + kv);
  EXPECT_EQ(t[1].row_end, q + 2 * kv);
  EXPECT_EQ(t[2].in_features, m.intermediate_size);
  EXPECT_EQ(t[2].out_features(), m.hidden_size);

  c.target_form = LoraTargetForm::AllLinear;
  EXPECT_EQ(resolve_lora_targets(c, m, "f").size(), 7u);
  c.target_form = LoraTargetForm::Regex;
  c.target_regex = R"(.*\.(q_proj|k_proj))";
  EXPECT_EQ(resolve_lora_targets(c, m, "f").size(), 2u);
  c.target_regex = R"(model\.layers\.0\.self_attn\.q_proj)";
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, m, "f"); }).find("layers_to_transform"), std::string::npos);
  c.target_regex = "nothing";
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, m, "f"); }).find("matches none"), std::string::npos);
  c.target_regex = "(";
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, m, "f"); }).find("regular expression"), std::string::npos);
}

TEST(LoraTargets, Gpt2SuffixMatching) {
  const ModelConfig m = preset_config("tiny-gpt2");
  LoraConfig c;
  c.target_modules = {"c_proj"};  // PEFT matches suffixes: both attn.c_proj and mlp.c_proj
  auto t = resolve_lora_targets(c, m, "f");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].field, Field::AttnOutWeight);
  EXPECT_EQ(t[1].field, Field::MlpOutWeight);
  c.target_modules = {"mlp.c_proj", "c_attn"};
  t = resolve_lora_targets(c, m, "f");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "attn.c_attn");
  EXPECT_EQ(t[0].out_features(), m.qkv_width());
  EXPECT_EQ(t[1].name, "mlp.c_proj");
}

// The modules come from the weights table and the family's HF names: the same list, rows
// and paths PEFT's named_modules() gives (what the family tables said when they were
// written by hand), for MHA and GQA Llama shapes and GPT-2's Conv1D.
TEST(LoraTargets, ModulesComeFromTheWeightsTableAndHfNames) {
  struct Want {
    std::string name;
    Field field;
    int64_t row_begin, row_end, in;
  };
  const auto check = [](const ModelConfig& m, const std::vector<Want>& want) {
    const std::vector<LoraModule> got = lora_modules(m);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(want[i].name);
      EXPECT_EQ(got[i].name, want[i].name);
      EXPECT_EQ(got[i].field, want[i].field);
      EXPECT_EQ(got[i].row_begin, want[i].row_begin);
      EXPECT_EQ(got[i].row_end, want[i].row_end);
      EXPECT_EQ(got[i].in_features, want[i].in);
    }
  };
  ModelConfig g = preset_config("tiny-gpt2");
  const int64_t h = g.hidden_size, f = g.intermediate_size;
  check(g, {{"attn.c_attn", Field::QkvWeight, 0, g.qkv_width(), h},
            {"attn.c_proj", Field::AttnOutWeight, 0, h, h},
            {"mlp.c_fc", Field::MlpInWeight, 0, f, h},
            {"mlp.c_proj", Field::MlpOutWeight, 0, h, f}});
  EXPECT_EQ(lora_module_path(g, 3, "attn.c_attn"), "transformer.h.3.attn.c_attn");
  EXPECT_EQ(lora_target_names(g), (std::vector<std::string>{"c_attn", "c_proj", "c_fc", "attn.c_proj", "mlp.c_proj"}));

  for (int64_t kv_heads : {int64_t{0}, int64_t{1}}) {
    ModelConfig m = llama();
    if (kv_heads > 0) m.num_kv_heads = kv_heads;
    const int64_t c = m.hidden_size, q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
    const int64_t ff = m.intermediate_size;
    SCOPED_TRACE("kv heads " + std::to_string(m.num_kv_heads));
    check(m, {{"self_attn.q_proj", Field::QkvWeight, 0, q, c},
              {"self_attn.k_proj", Field::QkvWeight, q, q + kv, c},
              {"self_attn.v_proj", Field::QkvWeight, q + kv, q + 2 * kv, c},
              {"self_attn.o_proj", Field::AttnOutWeight, 0, c, q},
              {"mlp.gate_proj", Field::MlpInWeight, 0, ff, c},
              {"mlp.up_proj", Field::MlpInWeight, ff, 2 * ff, c},
              {"mlp.down_proj", Field::MlpOutWeight, 0, c, ff}});
    EXPECT_EQ(lora_module_path(m, 12, "mlp.up_proj"), "model.layers.12.mlp.up_proj");
    EXPECT_EQ(lora_target_names(m),
              (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  }
}

TEST(LoraTargets, UnknownNamesListWhatTheModelHas) {
  LoraConfig c;
  c.target_modules = {"query_key_value"};
  const std::string e = error_of([&] { resolve_lora_targets(c, llama(), "adapter_config.json"); });
  EXPECT_NE(e.find("query_key_value"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"), std::string::npos) << e;
  c.target_modules = {"lm_head"};
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, llama(), "f"); }).find("modules_to_save"), std::string::npos);
}

// Issue 40: r = 2^63-1 corrupted the heap and 2^58..2^62 wrapped to "0 adapter
// parameters". A rank above kMaxLoraRank is refused when the config is read; one above an
// adapted layer's smaller dimension only warns (the update is full rank there already, and
// PEFT trains such adapters).
TEST(LoraConfig, HugeRanksAndAlphasAreRefusedBeforeAnySizeIsComputed) {
  for (const int64_t r : {INT64_MAX, int64_t{1} << 58, int64_t{1} << 62, kMaxLoraRank + 1}) {
    json j = peft_017_file();
    j["r"] = r;
    const std::string e = parse_error(j);
    EXPECT_NE(e.find("adapter_config.json: r " + std::to_string(r)), std::string::npos) << e;
  }
  json j = peft_017_file();
  j["lora_alpha"] = 1e300;
  EXPECT_NE(parse_error(j).find("lora_alpha"), std::string::npos);

  const ModelConfig m = llama();
  LoraConfig c;
  c.target_modules = {"q_proj", "v_proj"};
  const int64_t kv = m.num_kv_heads * m.head_dim;  // v_proj's out side, the smaller one
  c.r = kv;
  EXPECT_EQ(resolve_lora_targets(c, m, "f").size(), 2u);
  c.r = kv + 1;  // PEFT accepts it (a warning here), so adapters it trained load
  EXPECT_EQ(resolve_lora_targets(c, m, "f").size(), 2u);
}

// Issue 40: /dev/null (a device) given as an adapter config was reported as "no such file".
TEST(LoraConfig, ADeviceIsNamedAsNotARegularFile) {
  const std::string e = error_of([] { load_lora_config("/dev/null"); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  EXPECT_EQ(e.find("no such file"), std::string::npos) << e;
  EXPECT_NE(error_of([] { load_lora_config("/nonexistent/adapter_config.json"); }).find("no such file"),
            std::string::npos);
}
