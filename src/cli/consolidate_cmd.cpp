// zerotrain consolidate: a training checkpoint -> an HF model directory (zero_to_fp32.py).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "checkpoint/consolidate.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain consolidate CKPT OUT [options]

Writes the weights of a training checkpoint as a Hugging Face model directory OUT
(config.json, generation_config.json, model.safetensors or shards + index, the
tokenizer files) that
transformers' from_pretrained and `zerotrain train` (model.path) load, as DeepSpeed's
zero_to_fp32.py does. CKPT is a checkpoint directory (global_stepN, holding
manifest.json) or a checkpoint root (holding `latest`: the newest checkpoint). The shards
of every rank that saved it are joined; the optimizer state is not read. With --dtype f32,
a bf16/fp16 run's fp32 master weights are written (the exact weights). OUT is written
atomically; files in it that are not part of a model (README.md, ...) are kept.

  --dtype f32|bf16|f16       dtype of the written weights (f32)
  --max-shard-size SIZE      split the weights into files of at most SIZE (5GB; 500MB, 2GiB)
  --tokenizer PATH           the tokenizer to save with it: a tokenizer file or a directory
                             holding one (repeatable); default: the run's own tokenizer, as
                             the checkpoint records it. Its files go in under HF's names
                             with tokenizer_config.json and special_tokens_map.json
  --config DIR|config.json   the model's HF config, for checkpoints without
                             extra.model_config in their manifest
  --quiet                    no per-unit progress
)";

int run_consolidate(const Args& args) {
  std::vector<std::string> positional;
  checkpoint::ConsolidateOptions o;
  bool quiet = false;
  ArgParser p("consolidate");
  p.value("--dtype", [&](const std::string& v) {
    o.dtype = parse_dtype(v);
    if (!is_floating(o.dtype)) ZT_THROW_INPUT("--dtype must be f32, bf16 or f16 (got '", v, "')");
  });
  p.value("--max-shard-size",
          [&](const std::string& v) { o.max_shard_size = model::parse_byte_size(v, "--max-shard-size"); });
  p.value("--tokenizer", [&](const std::string& v) { o.tokenizer_files.push_back(v); });
  p.value("--config", [&](const std::string& v) { o.config_path = v; });
  p.flag("--quiet", [&] { quiet = true; });
  p.positional([&](const std::string& v) { positional.push_back(v); });
  p.parse(args);
  if (positional.size() != 2)
    ZT_THROW_INPUT("consolidate: expected CKPT and OUT (got ", positional.size(),
                   " arguments); see 'zerotrain consolidate --help'");
  if (!quiet) {
    o.on_unit = [](const checkpoint::ConsolidateProgress& u) {
      std::printf("[%zu/%zu] %-10s %lld elements (from %s)\n", u.index + 1, u.count, u.unit.c_str(),
                  static_cast<long long>(u.elements), u.source.c_str());
      std::fflush(stdout);
    };
  }
  const checkpoint::ConsolidateSummary s = checkpoint::consolidate_checkpoint(positional[0], positional[1], o);
  std::printf(
      "consolidated %s (step %lld, %d rank%s, from <unit>.%s): %lld parameters, %.1f MB of %s in %.2f s "
      "-> %s\n",
      s.checkpoint_dir.c_str(), static_cast<long long>(s.step), s.world_size, s.world_size == 1 ? "" : "s",
      s.source.c_str(), static_cast<long long>(s.parameters), static_cast<double>(s.bytes) / 1e6, dtype_name(o.dtype),
      s.seconds, positional[1].c_str());
  return 0;
}

const Registrar registrar{
    {"consolidate", "write a training checkpoint's weights as an HF model directory", run_consolidate, kHelp}};

}  // namespace
}  // namespace zt::cli
