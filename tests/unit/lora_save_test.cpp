// save_lora_adapter (model/lora_adapter.h): a model's adapter units written as PEFT's
// adapter folder read back by load_lora_adapter bit for bit, for GPT-2 (Conv1D: PEFT's
// fan_in_fan_out true) and Llama (q/k/v and gate/up packed in one field each: one PEFT
// module per HF tensor), with 16-bit adapters widened exactly to f32.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/small_models.h"
#include "common/temp_dir.h"
#include "core/rng.h"
#include "model/hf_names.h"
#include "model/lora.h"
#include "model/lora_adapter.h"
#include "model/transformer.h"

using namespace zt;
using namespace zt::model;
namespace fs = std::filesystem;

namespace {

void round_trip(Family family, DType dtype, const LoraConfig& lc) {
  const ModelConfig c = zt::testing::micro_config(family);
  ModelOptions o;
  o.param_dtype = o.grad_dtype = dtype;
  o.lora = lora_model_options(lc, c, "test");
  Transformer m(c, o);
  m.init_weights(3);
  uint64_t k = 0;
  m.registry().for_each([&](Unit& u, ParamEntry& p) {  // B non-zero, so that rows are told apart
    if (!is_lora_unit(u)) return;
    OwnedTensor v(p.spec.shape, DType::F32);
    fill_normal(v, Philox(11, ++k), 0.0f, 0.5f);
    p.value.copy_from(v);
  });
  const fs::path dir = zt::testing::fresh_test_dir("lora_save_", family_name(family));
  save_lora_adapter(m.registry(), c, lc, (dir / "adapter").string());
  const LoraAdapter back = load_lora_adapter((dir / "adapter").string(), c);
  EXPECT_EQ(back.config.fan_in_fan_out, family == Family::GPT2);
  EXPECT_EQ(back.config.r, lc.r);
  size_t compared = 0;
  for (const LoraFactors& f : back.factors) {
    const std::string module = lora_module_path(c, f.layer, f.module.name);
    for (const auto& [which, got] : {std::make_pair("A", &f.a), std::make_pair("B", &f.b)}) {
      const ParamEntry* e = m.registry().find(module + ".lora_" + which + ".weight");
      ASSERT_NE(e, nullptr) << module;
      EXPECT_EQ(got->view().shape(), e->spec.shape) << module << which;
      EXPECT_EQ(got->view().to_f32_vector(), e->value.to_f32_vector()) << module << which;
      ++compared;
    }
  }
  size_t tensors = 0;
  m.registry().for_each([&](Unit& u, ParamEntry&) { tensors += is_lora_unit(u) ? 1 : 0; });
  EXPECT_EQ(compared, tensors);
  fs::remove_all(dir);
}

}  // namespace

TEST(LoraSave, AdapterFolderReadsBackBitwise) {
  LoraConfig gpt2;
  gpt2.r = 4;
  gpt2.lora_alpha = 16;
  gpt2.target_form = LoraTargetForm::AllLinear;
  round_trip(Family::GPT2, DType::F32, gpt2);

  LoraConfig llama;
  llama.r = 2;
  llama.target_modules = {"q_proj", "k_proj", "v_proj", "up_proj", "down_proj"};
  round_trip(Family::Llama, DType::F32, llama);
  round_trip(Family::Llama, DType::BF16, llama);
}
