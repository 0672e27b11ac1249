// `zerotrain lora merge BASE ADAPTER OUT` on PEFT-made adapters (tests/data/peft): the merged
// directory's logits through `zerotrain eval --dump-logits` equal those of PEFT's
// merge_and_unload() model on the same ids (reference.safetensors) within 1e-5 of their
// range, for GPT-2
// (Conv1D, fan_in_fan_out, bias "all", rslora; modules_to_save wte or lm_head of its tied
// head, which PEFT's copy unties), Llama-3 (GQA, modules_to_save lm_head) and Qwen2; bad
// arguments exit 2 and leave no OUT.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using zt::testing::sh;
using zt::testing::zerotrain_binary;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("lora_merge_")) {}
};

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";

}  // namespace

TEST(LoraMerge, MergedLogitsEqualPeftMergeAndUnload) {
  ASSERT_TRUE(fs::exists(zerotrain_binary())) << "build the zerotrain target first";
  const std::pair<const char*, const char*> cases[] = {{"gpt2_c_attn", "gpt2"},
                                                       {"gpt2_all_linear", "gpt2"},
                                                       {"llama3_qv", "llama3"},
                                                       {"llama3_all", "llama3"},
                                                       {"qwen2_lora_only", "qwen2"},
                                                       {"gpt2_tied_wte", "gpt2"},
                                                       {"gpt2_tied_lm_head", "gpt2"}};
  for (const auto& [adapter, base] : cases) {
    SCOPED_TRACE(adapter);
    TempDir tmp;
    const std::string adapter_dir = kData + "peft/" + adapter;
    const zt::io::SafetensorsReader ref(adapter_dir + "/reference.safetensors");
    const std::string out = (tmp.path() / "merged").string();
    const auto m = sh(zerotrain_binary() + " lora merge " + kData + "hf/" + base + " " + adapter_dir + " " + out);
    ASSERT_EQ(m.rc, 0) << m.out;
    EXPECT_NE(m.out.find("[2/2] layer 1 merged"), std::string::npos) << m.out;

    std::ofstream(tmp.path() / "text.txt") << ref.metadata().at("text");
    const std::string logits = (tmp.path() / "logits.safetensors").string();
    const auto e = sh(zerotrain_binary() + " eval --model " + out + " --tokenizer bytes --data " +
                      (tmp.path() / "text.txt").string() + " --dump-logits " + logits);
    ASSERT_EQ(e.rc, 0) << e.out;
    const zt::io::SafetensorsReader got(logits);
    EXPECT_EQ(got.tensor("input_ids.0").to_f32_vector(), ref.tensor("input_ids").to_f32_vector());
    const std::vector<float> want = ref.tensor("logits").to_f32_vector();
    const std::vector<float> have = got.tensor("logits.0").to_f32_vector();
    ASSERT_EQ(want.size(), have.size());
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - have[i]));
    // f32 sums in another order than torch's: up to ~8e-5 absolute here on logits of range
    // ~20 (the base-model checks, tests/common/hf_fixtures.h, allow 1e-4 of the range); a
    // wrong merge is off by whole units.
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    EXPECT_LE(worst, 1e-5f * (*hi - *lo)) << "range " << (*hi - *lo);
  }
}

TEST(LoraMerge, BadArgumentsExit2AndWriteNothing) {
  TempDir tmp;
  const std::string out = (tmp.path() / "merged").string();
  auto r = sh(zerotrain_binary() + " lora merge " + kData + "hf/llama3 " + kData + "peft/gpt2_c_attn " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("query_key_value"), std::string::npos) << r.out;  // lists the names llama has
  EXPECT_FALSE(fs::exists(out));
  r = sh(zerotrain_binary() + " lora merge " + kData + "hf/llama3");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = sh(zerotrain_binary() + " lora frobnicate");
  EXPECT_EQ(r.rc, 2) << r.out;
}

// OUT replaces its directory whole: OUT naming the base model (as written, with a trailing
// slash, through a link, or a folder inside it) or the adapter is exit 2 naming the fix,
// before anything is read or written; the base is left byte for byte.
TEST(LoraMerge, AnOutThatIsAnInputIsRefused) {
  TempDir tmp;
  const fs::path base = tmp.path() / "base", adapter = tmp.path() / "adapter";
  fs::copy(kData + "hf/gpt2", base);
  fs::copy(kData + "peft/gpt2_c_attn", adapter);
  fs::create_directory_symlink(base, tmp.path() / "base_link");
  const std::string weights = zt::testing::file_bytes(base / "model.safetensors");
  const std::string b = base.string(), a = adapter.string();
  for (const std::string& out : {b, b + "/", (tmp.path() / "base_link").string(), b + "/merged",
                                 (tmp.path() / "x" / ".." / "base").string(), a}) {
    SCOPED_TRACE(out);
    const auto r = sh(zerotrain_binary() + " lora merge " + b + " " + a + " " + out);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("give OUT a directory of its own"), std::string::npos) << r.out;
    EXPECT_EQ(zt::testing::file_bytes(base / "model.safetensors"), weights);
    EXPECT_FALSE(fs::exists(base / "merged"));
  }
  const auto ok =
      sh(zerotrain_binary() + " lora merge " + b + " " + a + " " + (tmp.path() / "merged").string() + " --quiet");
  EXPECT_EQ(ok.rc, 0) << ok.out;
}

// An adapter tensor that adapter_config.json does not declare (here a c_fc weight, with
// bias "none" and no modules_to_save) would silently replace a base weight: exit 2 naming
// it, and no OUT.
TEST(LoraMerge, AnUndeclaredAdapterTensorIsRefusedByName) {
  TempDir tmp;
  const fs::path adapter = tmp.path() / "adapter";
  fs::copy(kData + "peft/gpt2_c_attn", adapter);
  {
    const zt::io::SafetensorsReader in(kData + "peft/gpt2_c_attn/adapter_model.safetensors");
    std::vector<std::pair<std::string, zt::Tensor>> tensors;
    for (const std::string& n : in.names()) tensors.emplace_back(n, in.tensor(n));
    const zt::io::SafetensorsReader base(kData + "hf/gpt2/model.safetensors");
    tensors.emplace_back("base_model.model.transformer.h.0.mlp.c_fc.weight",
                         base.tensor("transformer.h.0.mlp.c_fc.weight"));
    zt::io::save_safetensors((adapter / "adapter_model.safetensors").string(), tensors);
  }
  const std::string out = (tmp.path() / "merged").string();
  const auto r = sh(zerotrain_binary() + " lora merge " + kData + "hf/gpt2 " + adapter.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("base_model.model.transformer.h.0.mlp.c_fc.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("modules_to_save"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}
