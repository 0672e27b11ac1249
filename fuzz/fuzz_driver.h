// Fuzz targets build two ways from the same source:
//   - with ZT_FUZZ=ON and clang: libFuzzer drives LLVMFuzzerTestOneInput (coverage-guided,
//     AddressSanitizer);
//   - otherwise: fuzz/standalone_driver.cpp supplies main(), which replays the seeds and
//     any corpus files given, then applies random mutations for a bounded time, so CI runs
//     the same targets with no libFuzzer.
// A target accepts any bytes: a zt::Error of a user-facing kind is the expected outcome
// for garbage; anything else (a crash, an Internal error, another exception) is a bug.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace zt::fuzz {
// Valid inputs the target starts from (the standalone driver mutates these).
std::vector<std::string> seeds();
// A per-process scratch file for targets whose API takes a path.
std::string scratch_path(const std::string& suffix);
void write_file(const std::string& path, const uint8_t* data, size_t size);
}  // namespace zt::fuzz
