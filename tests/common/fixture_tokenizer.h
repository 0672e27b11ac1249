// The small byte-level BPE the LoRA tests pair with the HF-made fixtures in tests/data/hf
// (300 entries: those models have 320 embedding rows), trained on data/text/artistic.txt.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"

namespace zt::testing {

// Writes DIR/tok.json (creating DIR) and returns its path.
inline std::string write_fixture_tokenizer(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  io::BpeTrainOptions o;
  o.vocab_size = 300;
  const std::filesystem::path path = dir / "tok.json";
  std::ofstream(path) << io::train_bpe_tokenizer_json(
      {io::read_text_file(std::string(ZT_SOURCE_DIR) + "/data/text/artistic.txt")}, o);
  return path.string();
}

}  // namespace zt::testing
