#include "train/tokenizer_texts.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/document_source.h"
#include "io/sft_record.h"
#include "io/tokenizer.h"

namespace zt::train {
namespace fs = std::filesystem;

namespace {

// One JSON Lines record's text: its field, or an SFT record's rendering.
std::string record_text(const std::string& line, const std::string& field, const io::SftEncoder& sft) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& x) {
    ZT_THROW_INPUT("not valid JSON (", x.what(), ")");
  }
  io::RecordKind kind = io::RecordKind::Text;
  if (!j.is_object() || !io::detect_record_kind(j, field, kind))
    ZT_THROW_INPUT("neither a text record (field '", field,
                   "') nor a supervised fine-tuning record ({messages}, {prompt, response}, {instruction, output})");
  if (kind == io::RecordKind::Text) return j[field].get<std::string>();
  return sft.render(j, kind);
}

}  // namespace

std::vector<std::string> tokenizer_training_texts(const config::TrainConfig& c) {
  std::vector<std::string> files;
  for (const std::string& p : c.data.train) {
    if (fs::path(p).extension() == ".bin") continue;
    for (const std::string& f : io::list_document_files({p}))
      if (fs::path(f).extension() != ".bin") files.push_back(f);
  }
  io::DocumentOptions o{c.data.jsonl_field, "data.jsonl_field in " + c.source};
  o.jsonl = io::DocumentOptions::Jsonl::Records;  // SFT records have no text field
  // The encoder only renders here: the tokenizer it is given (there is none yet) is never
  // asked to encode, and the template is the one named (a new tokenizer carries none).
  const auto no_tokenizer_yet = io::make_byte_tokenizer();
  io::SftEncoderOptions so;
  so.field = c.data.jsonl_field;
  so.chat_template = c.data.chat_template;
  so.chat_template_option = "data.chat_template in " + c.source;
  const io::SftEncoder sft(*no_tokenizer_yet, so);
  std::vector<std::string> texts;
  int64_t skipped = 0;
  for (const std::string& f : files) {
    const auto source = io::open_document_source(f, o);
    for (io::DocumentRecord r; source->next_record(r);) {
      std::string text;
      if (!r.json_line) {
        text = std::move(r.text);
      } else if (r.text.find_first_not_of(" \t\r\n") != std::string::npos) {
        try {
          text = record_text(r.text, c.data.jsonl_field, sft);
        } catch (const Error& x) {
          if (x.kind() != ErrorKind::BadInput) throw;
          if (!c.data.skip_bad_records)
            ZT_THROW_INPUT(r.where, ": ", x.what(), " (data.skip_bad_records: true counts and skips such records)");
          ++skipped;
          continue;
        }
      }
      if (!text.empty()) texts.push_back(std::move(text));
    }
  }
  if (skipped > 0) ZT_WARN("tokenizer training: skipped ", skipped, " bad record(s) (data.skip_bad_records)");
  return texts;
}

}  // namespace zt::train
