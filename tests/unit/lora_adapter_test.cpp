// PEFT adapter folders made by PEFT itself (tests/data/peft, tools/make_peft_fixtures.py):
// their names and shapes read per family, and merge_lora's weights equal PEFT's
// merge_and_unload() (reference.safetensors' merged.* tensors); bad folders are clear
// errors naming the file and the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/input_error.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/lora_adapter.h"
#include "model/lora_merge.h"

namespace fs = std::filesystem;
using namespace zt;
using namespace zt::model;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("lora_adapter_")) {}
};

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";
std::string peft_dir(const std::string& name) { return kData + "peft/" + name; }
std::string base_dir(const std::string& family) { return kData + "hf/" + family; }

struct Fixture {
  const char* adapter;
  const char* base;
};
const Fixture kFixtures[] = {{"gpt2_c_attn", "gpt2"},      {"gpt2_all_linear", "gpt2"},  {"llama3_qv", "llama3"},
                             {"llama3_all", "llama3"},     {"qwen2_lora_only", "qwen2"}, {"gpt2_tied_wte", "gpt2"},
                             {"gpt2_tied_lm_head", "gpt2"}};

std::string error_of(const std::function<void()>& fn) { return zt::testing::input_error_of(fn); }

void copy_dir(const std::string& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), to / e.path().filename());
}

}  // namespace

TEST(PeftNames, KeysPerFamily) {
  const ModelConfig llama = load_hf_config(base_dir("llama3"));
  EXPECT_EQ(peft_lora_key(llama, 3, "self_attn.q_proj", 'A'),
            "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight");
  const ModelConfig gpt2 = load_hf_config(base_dir("gpt2"));
  EXPECT_EQ(peft_lora_key(gpt2, 0, "attn.c_attn", 'B'), "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
  EXPECT_EQ(peft_base_key("transformer.h.0.attn.c_attn.bias", true),
            "base_model.model.transformer.h.0.attn.c_attn.base_layer.bias");
  EXPECT_EQ(peft_base_key("lm_head.weight", false), "base_model.model.lm_head.weight");
}

TEST(PeftAdapter, ReadsPeftMadeFolders) {
  const LoraAdapter c_attn = load_lora_adapter(peft_dir("gpt2_c_attn"), load_hf_config(base_dir("gpt2")));
  EXPECT_TRUE(c_attn.config.fan_in_fan_out);
  ASSERT_EQ(c_attn.factors.size(), 2u);  // c_attn in 2 layers
  EXPECT_EQ(c_attn.factors[1].layer, 1);
  EXPECT_EQ(c_attn.factors[0].a->shape(), (Shape{4, 64}));   // [r, in] even for Conv1D
  EXPECT_EQ(c_attn.factors[0].b->shape(), (Shape{192, 4}));  // [out, r]
  EXPECT_TRUE(c_attn.replaced.empty());

  const LoraAdapter all = load_lora_adapter(peft_dir("gpt2_all_linear"), load_hf_config(base_dir("gpt2")));
  EXPECT_EQ(all.modules.size(), 4u);  // c_attn, both c_proj, c_fc
  EXPECT_TRUE(all.config.use_rslora);
  EXPECT_DOUBLE_EQ(all.config.scaling(), 8.0 / 2.0);
  // bias "all": every bias, wrapped ones without ".base_layer"
  const auto has = [&](const std::string& n) {
    return std::any_of(all.replaced.begin(), all.replaced.end(), [&](const auto& p) { return p.first == n; });
  };
  EXPECT_TRUE(has("transformer.h.0.attn.c_attn.bias"));
  EXPECT_TRUE(has("transformer.h.1.ln_2.bias"));
  EXPECT_TRUE(has("transformer.ln_f.bias"));

  const LoraAdapter qv = load_lora_adapter(peft_dir("llama3_qv"), load_hf_config(base_dir("llama3")));
  ASSERT_EQ(qv.modules.size(), 2u);
  EXPECT_EQ(qv.modules[1].row_begin, 64 + 32);  // v after q (64) and k (32 with GQA 4/2)
  EXPECT_EQ(qv.factors[1].b->shape(), (Shape{32, 4}));

  const LoraAdapter la = load_lora_adapter(peft_dir("llama3_all"), load_hf_config(base_dir("llama3")));
  EXPECT_EQ(la.config.init_lora_weights, LoraInit::Gaussian);
  ASSERT_EQ(la.replaced.size(), 1u);
  EXPECT_EQ(la.replaced[0].first, "lm_head.weight");  // modules_to_save
}

TEST(PeftAdapter, MergeEqualsPeftMergeAndUnload) {
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(f.adapter);
    TempDir tmp;
    const std::string out = (tmp.path() / "merged").string();
    const LoraMergeSummary s = merge_lora(base_dir(f.base), peft_dir(f.adapter), out);
    EXPECT_GT(s.modules, 0);
    EXPECT_EQ(s.dtype, DType::F32);
    for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
      EXPECT_TRUE(fs::exists(fs::path(out) / file)) << file;
    const io::SafetensorsReader ref(peft_dir(f.adapter) + "/reference.safetensors");
    const io::SafetensorsReader got(out + "/model.safetensors");
    int compared = 0;
    for (const std::string& key : ref.names()) {
      if (key.rfind("merged.", 0) != 0) continue;
      const std::string name = key.substr(7);
      ASSERT_TRUE(got.contains(name)) << name;
      const std::vector<float> want = ref.tensor(key).to_f32_vector();
      const std::vector<float> have = got.tensor(name).to_f32_vector();
      ASSERT_EQ(want.size(), have.size()) << name;
      float worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - have[i]));
      EXPECT_LE(worst, 1e-5f) << name;
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
}

TEST(PeftAdapter, BadFoldersNameTheFileAndKey) {
  const ModelConfig llama = load_hf_config(base_dir("llama3"));
  // an adapter for another family
  std::string e = error_of([&] { load_lora_adapter(peft_dir("gpt2_c_attn"), llama); });
  EXPECT_NE(e.find("c_attn"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj"), std::string::npos) << e;

  TempDir tmp;
  // another rank in the config than in the file
  const fs::path bad_r = tmp.path() / "bad_r";
  copy_dir(peft_dir("llama3_qv"), bad_r);
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(bad_r / "adapter_config.json"));
    j["r"] = 8;
    std::ofstream(bad_r / "adapter_config.json") << j.dump(2);
  }
  e = error_of([&] { load_lora_adapter(bad_r.string(), llama); });
  EXPECT_NE(e.find("adapter_model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("lora_A.weight has shape [4, 64], expected [8, 64]"), std::string::npos) << e;

  // a target whose tensors are missing
  const fs::path missing = tmp.path() / "missing";
  copy_dir(peft_dir("llama3_qv"), missing);
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(missing / "adapter_config.json"));
    j["target_modules"] = {"q_proj", "v_proj", "k_proj"};
    std::ofstream(missing / "adapter_config.json") << j.dump(2);
  }
  e = error_of([&] { load_lora_adapter(missing.string(), llama); });
  EXPECT_NE(e.find("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight is missing"), std::string::npos)
      << e;

  // a pickle only
  const fs::path pickle = tmp.path() / "pickle";
  fs::create_directories(pickle);
  fs::copy_file(peft_dir("llama3_qv") + "/adapter_config.json", pickle / "adapter_config.json");
  std::ofstream(pickle / "adapter_model.bin") << "x";
  e = error_of([&] { load_lora_adapter(pickle.string(), llama); });
  EXPECT_NE(e.find("adapter_model.bin"), std::string::npos) << e;
}

// PEFT's copy of a tied model's wte or lm_head unties the pair: the merged model has a head
// of its own (the base's embedding, or the trained copy) and says so in config.json, so
// that from_pretrained does not tie it again.
TEST(PeftAdapter, MergingACopyOfATiedModuleUntiesTheHead) {
  const io::SafetensorsReader base(base_dir("gpt2") + "/model.safetensors");
  const std::vector<float> base_wte = base.tensor("transformer.wte.weight").to_f32_vector();
  for (const char* adapter : {"gpt2_tied_wte", "gpt2_tied_lm_head"}) {
    SCOPED_TRACE(adapter);
    TempDir tmp;
    const std::string out = (tmp.path() / "merged").string();
    const LoraMergeSummary s = merge_lora(base_dir("gpt2"), peft_dir(adapter), out);
    EXPECT_TRUE(s.untied_head);
    EXPECT_EQ(s.replaced, 1);
    const ModelConfig merged = load_hf_config(out);
    EXPECT_FALSE(merged.tie_word_embeddings);
    const io::SafetensorsReader got(out + "/model.safetensors");
    ASSERT_TRUE(got.contains("lm_head.weight"));
    const std::vector<float> head = got.tensor("lm_head.weight").to_f32_vector();
    const std::vector<float> wte = got.tensor("transformer.wte.weight").to_f32_vector();
    const bool head_trained = std::string(adapter) == "gpt2_tied_lm_head";
    EXPECT_EQ(head == base_wte, !head_trained);  // the untrained one stays the base's embedding
    EXPECT_EQ(wte == base_wte, head_trained);
  }
  // An untied base stays untied, with nothing added.
  TempDir tmp;
  const LoraMergeSummary s = merge_lora(base_dir("llama3"), peft_dir("llama3_all"), (tmp.path() / "m").string());
  EXPECT_FALSE(s.untied_head);
}
