// Fuzz target: any bytes as a tokenizer.json. load_tokenizer must either fail with a
// user-facing zt::Error or give a tokenizer that encodes and decodes without crashing.
#include <cstdlib>

#include "core/error.h"
#include "fuzz_driver.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = zt::fuzz::scratch_path("_tokenizer.json");
  zt::fuzz::write_file(path, data, size);
  try {
    const auto tok = zt::io::load_tokenizer(path);
    const auto ids = tok->encode("Hello, world! caf\xc3\xa9 123  x\n");
    (void)tok->decode(ids);
    (void)tok->vocab_size();
  } catch (const zt::Error& e) {
    if (e.kind() == zt::ErrorKind::Internal) std::abort();
  }
  return 0;
}

namespace zt::fuzz {
std::vector<std::string> seeds() {
  return {
      R"({"version":"1.0","added_tokens":[{"id":5,"content":"<|endoftext|>","special":true,"single_word":false,)"
      R"("lstrip":false,"rstrip":false,"normalized":false}],"normalizer":null,)"
      R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)"
      R"("post_processor":null,"decoder":{"type":"ByteLevel"},)"
      R"("model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,)"
      R"("end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,)"
      R"("vocab":{"H":0,"e":1,"l":2,"o":3,"He":4},"merges":["H e"]}})",
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}})",
  };
}
}  // namespace zt::fuzz
