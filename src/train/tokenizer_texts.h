// The texts a preset's tokenizer is trained on (a run with model.preset or model.config and
// no model.tokenizer): the documents of the training files that are not token shards, read
// as `prepare` reads them, so the vocabulary is learnt from what it will tokenize.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace zt::train {

// Plain documents as they are (a JSONL record's data.jsonl_field, Arrow's column, a text
// file); supervised fine-tuning records (io/sft_record.h) as the text their chat template
// (data.chat_template) or prompt format renders. A malformed record is BadInput naming
// file:line, or skipped with data.skip_bad_records.
std::vector<std::string> tokenizer_training_texts(const config::TrainConfig& c);

}  // namespace zt::train
