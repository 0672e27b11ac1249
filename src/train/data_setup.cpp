#include "train/data_setup.h"
#include "core/strings.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "io/prepare.h"
#include "io/sft_record.h"
#include "io/token_dataset.h"

namespace zt::train {
namespace fs = std::filesystem;

namespace {

// A directory `zerotrain prepare` wrote: train_*.bin and val_*.bin beside dataset.json.
bool is_prepared_dir(const std::string& p) { return fs::is_directory(p) && fs::exists(fs::path(p) / "dataset.json"); }

bool is_shard_path(const std::string& p) {
  if (is_prepared_dir(p)) return true;
  if (fs::is_directory(p)) {
    bool any = false;
    for (const auto& e : fs::directory_iterator(p)) {
      if (!e.is_regular_file()) continue;
      if (e.path().extension() != ".bin") return false;
      any = true;
    }
    return any;
  }
  return fs::path(p).extension() == ".bin";
}

// Shards named by the inputs; from a prepared directory only the `prefix` split
// ("train_" or "val_"), so its validation shards never leak into training.
std::vector<std::string> shards_of(const std::vector<std::string>& inputs, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& p : inputs) {
    std::vector<std::string> found;
    if (is_prepared_dir(p)) {
      for (const auto& e : fs::directory_iterator(p)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && e.path().extension() == ".bin" && name.rfind(prefix, 0) == 0)
          found.push_back(e.path().string());
      }
      std::sort(found.begin(), found.end());
    } else {
      found = io::list_token_shards(p);
    }
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

std::vector<std::string> with_prefix(const std::vector<std::string>& paths, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& p : paths)
    if (fs::path(p).filename().string().rfind(prefix, 0) == 0) out.push_back(p);
  std::sort(out.begin(), out.end());
  return out;
}

io::PrepareSummary prepare(const std::vector<std::string>& inputs, const fs::path& dir, const config::TrainConfig& c,
                           double val_fraction, const io::Tokenizer& tokenizer, int64_t sft_window = 0) {
  io::PrepareOptions po;
  po.inputs = inputs;
  po.output_dir = dir.string();
  po.jsonl_field = c.data.jsonl_field;
  po.field_option = "data.jsonl_field in " + c.source;
  po.chat_template = c.data.chat_template;
  po.chat_template_option = "data.chat_template in " + c.source;
  po.bad_records = c.data.skip_bad_records ? io::BadRecords::Skip : io::BadRecords::Fail;
  po.val_fraction = val_fraction;
  po.progress = io::Progress::Auto;
  po.sft_window = sft_window;
  const io::PrepareSummary s = io::prepare_dataset(po, tokenizer);
  ZT_INFO("prepared ", s.documents, " documents (", s.train_tokens, " train / ", s.val_tokens, " val tokens) into ",
          dir.string());
  return s;
}

// The SFT samples that keep no target in their padded window (io::UntrainedSamples).
void check_sft_windows(const io::UntrainedSamples& u, const config::TrainConfig& c, int64_t T, bool main_rank) {
  if (u.count == 0) return;
  const std::string needed = u.seq_len_needed > 0
                                 ? str("a data.seq_len of at least ", u.seq_len_needed, " (the longest such prompt is ",
                                       u.seq_len_needed, " tokens; at most the model's max_position_embeddings), ")
                                 : std::string();
  const std::string examples =
      join(u.examples, "; ") + (u.count > static_cast<int64_t>(u.examples.size()) ? "; ..." : "");
  if (u.count == u.samples) {
    const std::string why = str(
        "each sample is padded into a window of its own and cut at the end (data.packing: false; HF's "
        "truncation_side right), and every prompt fills data.seq_len ",
        T, ", so every label would be masked and the run would train nothing (loss 0 and grad norm 0 at every step)");
    ZT_THROW_INPUT(c.source, ": data.train: none of the ", u.samples, " SFT samples has a target (a response token) ",
                   "within its first ", T + 1, " tokens (", examples, "): ", why, ". Fix: ", needed,
                   "shorter prompts, or data.packing: true (packed windows keep every response token)");
  }
  if (main_rank)
    ZT_WARN(c.source, ": data.train: ", u.count, " of ", u.samples, " SFT samples have no target within their first ",
            T + 1, " tokens (the prompt fills data.seq_len ", T,
            "; samples are cut at the end) and train nothing: ", examples, "; ",
            needed.empty() ? std::string() : needed + "or ", "data.packing: true trains them");
}

}  // namespace

config::TrainConfig config_reading_prepared_files(const config::TrainConfig& c, const fs::path& out) {
  config::TrainConfig f = c;
  if (c.model.path.empty() && c.model.tokenizer.empty()) f.model.tokenizer = (out / "tokenizer.json").string();
  if (!std::all_of(c.data.train.begin(), c.data.train.end(), is_shard_path)) f.data.train = {(out / "data").string()};
  if (!c.data.validation.empty() && !std::all_of(c.data.validation.begin(), c.data.validation.end(), is_shard_path))
    f.data.validation = {(out / "data_validation").string()};
  return f;
}

DataSetup setup_data(const config::TrainConfig& c, const io::Tokenizer& tokenizer, const fs::path& out, int64_t seq_len,
                     bool main_rank) {
  if (c.data.train.empty())
    ZT_THROW_INPUT(c.source, ": data.train is empty: name text/JSONL files, directories or token shards to train on");
  DataSetup d;
  const bool train_shards = std::all_of(c.data.train.begin(), c.data.train.end(), is_shard_path);
  const bool has_val = !c.data.validation.empty();
  // Padded per-sample windows of seq_len + 1 tokens; packed windows keep every target.
  const int64_t sft_window = c.data.packing ? 0 : seq_len + 1;
  io::UntrainedSamples untrained;
  if (train_shards) {
    d.train_shards = shards_of(c.data.train, "train_");
    // A prepared directory carries its own validation split.
    if (!has_val && std::all_of(c.data.train.begin(), c.data.train.end(), is_prepared_dir))
      d.val_shards = shards_of(c.data.train, "val_");
    if (sft_window > 0) untrained = io::untrained_samples(d.train_shards, sft_window);
  } else {
    // Preparing names the records themselves (file:line).
    const io::PrepareSummary s =
        prepare(c.data.train, out / "data", c, has_val ? 0.0 : c.data.validation_fraction, tokenizer, sft_window);
    d.train_shards = with_prefix(s.shards, "train_");
    if (!has_val) d.val_shards = with_prefix(s.shards, "val_");
    untrained = s.untrained;
  }
  check_sft_windows(untrained, c, seq_len, main_rank);
  if (has_val) {
    if (std::all_of(c.data.validation.begin(), c.data.validation.end(), is_shard_path)) {
      // A prepared directory's val_ split, or all of it when it was prepared as one set.
      d.val_shards = shards_of(c.data.validation, "val_");
      if (d.val_shards.empty()) d.val_shards = shards_of(c.data.validation, "train_");
    } else {
      const io::PrepareSummary s = prepare(c.data.validation, out / "data_validation", c, 0.0, tokenizer);
      d.val_shards = with_prefix(s.shards, "train_");
    }
  }
  if (d.train_shards.empty()) ZT_THROW_INPUT(c.source, ": data.train yields no training tokens");
  return d;
}

}  // namespace zt::train
