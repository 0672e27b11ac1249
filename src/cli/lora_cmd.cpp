// zerotrain lora merge: a PEFT LoRA adapter merged into its base model (merge_and_unload).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "model/lora_merge.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain lora merge BASE ADAPTER OUT [options]

Merges a LoRA adapter into its base model, as PEFT's merge_and_unload() does, and writes
the merged model as a Hugging Face directory OUT that transformers' from_pretrained and
zerotrain (eval, generate, train's model.path) load with no adapter.

BASE is the base model's HF directory (config.json + model.safetensors or shards);
ADAPTER a PEFT adapter folder (adapter_config.json + adapter_model.safetensors, as
PeftModel.save_pretrained and a zerotrain LoRA run's final/ write it). Every adapted
linear becomes W + scaling * B @ A (scaling = lora_alpha / r, or lora_alpha / sqrt(r)
with use_rslora; GPT-2's Conv1D weights take the transpose); trained biases and
modules_to_save replace the base's (a trained copy of a tied model's head or token
embedding unties them, as PEFT's copies do: OUT's config.json then has
tie_word_embeddings false and a lm_head.weight of its own). The merge runs in f32 (4 bytes per parameter of
host memory); OUT gets the base's dtype, config.json, its generation_config.json and its
tokenizer files, written atomically (files in OUT that are not part of a model are kept).
OUT must be a directory of its own: BASE, ADAPTER or a folder inside either is refused.
An adapter tensor that adapter_config.json does not declare (a base weight outside its
bias setting and modules_to_save) is refused by name.

  --dtype f32|bf16|f16   dtype of the written weights (default: the base files')
  --quiet                no per-layer progress
)";

int run_lora(const Args& args) {
  std::vector<std::string> positional;
  model::LoraMergeOptions o;
  bool quiet = false;
  ArgParser p("lora");
  p.value("--dtype", [&](const std::string& v) {
    o.dtype = parse_dtype(v);
    o.dtype_given = true;
    if (!is_floating(o.dtype)) ZT_THROW_INPUT("--dtype must be f32, bf16 or f16 (got '", v, "')");
  });
  p.flag("--quiet", [&] { quiet = true; });
  p.positional([&](const std::string& v) { positional.push_back(v); });
  p.parse(args);
  if (positional.empty() || positional[0] != "merge")
    ZT_THROW_INPUT(
        "lora: expected a subcommand: 'zerotrain lora merge BASE ADAPTER OUT' (see 'zerotrain lora --help')");
  if (positional.size() != 4)
    ZT_THROW_INPUT("lora merge: expected BASE, ADAPTER and OUT (got ", positional.size() - 1,
                   " arguments); see 'zerotrain lora --help'");
  if (!quiet) {
    o.on_layer = [](const model::LoraMergeProgress& pr) {
      std::printf("[%lld/%lld] layer %lld merged\n", static_cast<long long>(pr.layer + 1),
                  static_cast<long long>(pr.layers), static_cast<long long>(pr.layer));
      std::fflush(stdout);
    };
  }
  const model::LoraMergeSummary s = model::merge_lora(positional[1], positional[2], positional[3], o);
  std::printf("merged %s into %s: %lld adapted modules (scaling %g), %lld replaced tensors, %s -> %s\n",
              positional[2].c_str(), positional[1].c_str(), static_cast<long long>(s.modules), s.scaling,
              static_cast<long long>(s.replaced), dtype_name(s.dtype), positional[3].c_str());
  if (s.untied_head)
    std::printf("the adapter trains a copy of the tied head or token embedding (modules_to_save): %s has an "
                "untied lm_head (tie_word_embeddings false), as PEFT's merge_and_unload gives\n",
                positional[3].c_str());
  return 0;
}

const Registrar registrar{{"lora", "merge a PEFT LoRA adapter into its base model (lora merge)", run_lora, kHelp}};

}  // namespace
}  // namespace zt::cli
