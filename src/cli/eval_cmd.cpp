// zerotrain eval: mean loss and perplexity of a HF model directory on text.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "core/strings.h"
#include "cli/command.h"
#include "cli/device_init.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "io/bounded_file.h"
#include "io/hf_dataset_dir.h"
#include "io/tokenizer.h"
#include "model/inference_load.h"
#include "train/evaluate.h"
#include "train/logits_dump.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain eval --model DIR --data FILE [options]

Scores the model in DIR (a HF directory) on FILE and prints the mean next-token loss,
the perplexity and the number of predicted tokens.

FILE is text: a .jsonl file holds one document per line (the --jsonl-field string of
each JSON object); an Arrow file (.arrow), a datasets save_to_disk folder or a Parquet
file one document per row of that column; any other text file is one document. Documents are tokenized with the
model's tokenizer (BOS added as the tokenizer does). FILE may also be token shards (a
.bin file or a directory of them, as `zerotrain prepare` writes): a document starts at
each EOS id. Each document is scored on its own, in
non-overlapping windows of --seq-len tokens: every token but a document's first is
predicted once, from the earlier tokens of its window.

Supervised fine-tuning data is scored as training scores it: a .jsonl file whose first
record is an SFT record ({messages}, {prompt, response|completion}, Alpaca's
{instruction, input, output}) is rendered and masked as `zerotrain prepare` does, and SFT
token shards carry their mask; each sample is a document and only its response tokens
(the targets whose label is not -100) are predicted and counted.

  --model DIR            HF model directory (GPT-2, Llama, Mistral, Qwen2), or a PEFT
                         adapter folder whose base_model_name_or_path is one
  --adapter DIR          a PEFT LoRA adapter folder (a LoRA run's final/) on top of
                         --model's weights (merged in f32 when loaded)
  --data FILE            .txt (one document), .jsonl (one document per line), .arrow,
                         .parquet or a save_to_disk folder (one per row), or token
                         shards (.bin file or directory; documents split at EOS)
  --seq-len T            window length (default: the model's context)
  --jsonl-field NAME     the text field of .jsonl lines / column of Arrow, Parquet ("text")
  --chat-template NAME   SFT conversations: chatml, llama3, mistral, alpaca or a Jinja
                         file (default: the tokenizer's chat_template)
  --skip-bad-records     SFT records: count and skip unreadable records (else exit 2)
  --batch-size N         windows per forward pass (8)
  --tokenizer PATH       tokenizer file or directory (default: DIR); "bytes": byte ids
  --device DEV           cpu (default) or cuda: the forward runs on the GPU
  --threads N            CPU threads (default: all cores)
  --dump-logits OUT      also write every position's f32 logits of each document, one
                         forward pass over the whole document, to the safetensors file
                         OUT: input_ids.I (i32 [T]) and logits.I (f32 [T, vocab]) for
                         document I = 0, 1, ... (for comparing with another
                         implementation, e.g. transformers; documents must fit the context)
  --log-level LEVEL      debug, info, warn, error
)";

int run_eval(const Args& args) {
  std::string model_dir, data, field = "text", tokenizer_path, logits_out;
  Device device = Device::cpu();
  train::EvalOptions o;
  ArgParser p("eval");
  std::string adapter_dir;
  p.value("--model", [&](const std::string& v) { model_dir = v; });
  p.value("--adapter", [&](const std::string& v) { adapter_dir = v; });
  p.value("--data", [&](const std::string& v) { data = v; });
  p.value("--seq-len", [&](const std::string& v) { o.seq_len = parse_int("--seq-len", v); });
  p.value("--jsonl-field", [&](const std::string& v) { field = v; });
  train::SftRecordOptions sft_options;
  p.value("--chat-template", [&](const std::string& v) { sft_options.chat_template = v; });
  p.flag("--skip-bad-records", [&] { sft_options.skip_bad_records = true; });
  p.value("--batch-size", [&](const std::string& v) { o.batch_size = parse_int("--batch-size", v); });
  p.value("--tokenizer", [&](const std::string& v) { tokenizer_path = v; });
  p.value("--device", [&](const std::string& v) { device = parse_device(v); });
  p.value("--threads", [&](const std::string& v) { apply_threads_flag(v); });
  p.value("--log-level", [&](const std::string& v) { set_log_level(parse_log_level(v)); });
  p.value("--dump-logits", [&](const std::string& v) { logits_out = v; });
  p.parse(args);
  if (model_dir.empty()) ZT_THROW_INPUT("eval: --model DIR is required (a HF model directory)");
  if (data.empty())
    ZT_THROW_INPUT("eval: --data FILE is required (.txt, .jsonl, or token shards: .bin or a directory)");
  if (o.seq_len < 0 || (o.seq_len == 0 && args.end() != std::find(args.begin(), args.end(), "--seq-len")))
    ZT_THROW_INPUT("--seq-len must be positive, got ", o.seq_len);
  // Before minutes of model loading: a FIFO (whose open would wait forever), a device
  // (/dev/zero never ends) is an exit-2 error naming it and what it is.
  std::error_code ec;
  if (std::filesystem::exists(data, ec) && !std::filesystem::is_directory(data, ec))
    io::check_bounded_file(data, "eval --data file", io::kNoCap);
  // A datasets save_to_disk folder is text; any other directory holds shards.
  const bool shards = ends_with(data, ".bin") ||
                      (std::filesystem::is_directory(data) && io::hf_dataset_dir_kind(data) == io::HfDatasetDir::None);
  init_device("eval", device);
  const model::ModelAndAdapter chosen = model::resolve_model_and_adapter(model_dir, adapter_dir);
  model_dir = chosen.model;
  model::InferenceModel m = model::load_for_inference(model_dir, DType::F32, device, chosen.adapter);
  const auto tok = tokenizer_path == "bytes"
                       ? io::make_byte_tokenizer()
                       : io::load_tokenizer(tokenizer_path.empty() ? chosen.tokenizer : tokenizer_path);
  std::vector<std::vector<int32_t>> docs;
  sft_options.jsonl_field = field;
  // SFT data (records or shards with a loss mask) is scored on its response tokens only.
  train::SftDocuments sft =
      shards ? train::read_sft_shard_documents(data) : train::read_sft_records(data, *tok, sft_options);
  if (!sft.empty()) {
    docs = std::move(sft.ids);
    std::printf("SFT data: %zu samples; the loss counts their response tokens only, as training does\n", docs.size());
  } else if (shards) {
    // Token shards are already tokenized: documents start at each EOS (as prepare writes them).
    const int64_t eos = tok->eos_id() >= 0 ? tok->eos_id() : m.model->config().eos_token_id;
    docs = train::read_shard_documents(data, eos);
  } else {
    const std::vector<std::string> texts = train::read_text_documents(data, field);
    docs.reserve(texts.size());
    for (const auto& t : texts) docs.push_back(tok->encode(t, io::SpecialTokens::Add));
  }
  if (!logits_out.empty()) {
    train::dump_logits(*m.model, docs, logits_out);
    std::printf("wrote the logits of %zu document%s to %s\n", docs.size(), docs.size() == 1 ? "" : "s",
                logits_out.c_str());
    // Documents of one token are dumped but predict nothing: no loss to print then.
    if (std::none_of(docs.begin(), docs.end(), [](const auto& d) { return d.size() >= 2; })) return 0;
  }
  const train::EvalResult r = train::evaluate(*m.model, docs, o, sft.masks.empty() ? nullptr : &sft.masks);
  std::printf("documents %lld | windows %lld | tokens %lld | mean loss %.6f | perplexity %.4f\n",
              static_cast<long long>(r.documents), static_cast<long long>(r.windows), static_cast<long long>(r.tokens),
              r.mean_loss(), r.perplexity());
  std::fflush(stdout);
  return 0;
}

const Registrar registrar{
    {"eval", "mean loss and perplexity of a HF model directory on text or token shards", run_eval, kHelp}};

}  // namespace
}  // namespace zt::cli
