// Free memory, asked before a large allocation so that a model that cannot fit is refused
// up front with the numbers (exit 2), not by the OOM killer or a failed malloc half-way
// through a load.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace zt {

// MemAvailable of /proc/meminfo, in bytes; nullopt where it cannot be read. The test-only
// environment variable ZT_TEST_HOST_MEMORY_BYTES replaces it (the refusal tests use it).
std::optional<uint64_t> host_available_bytes();

// BadInput when `bytes` exceed the host's available memory: "<what> need X, but only Y
// is available ...". Does nothing when the available memory is unknown.
// `fix` replaces the default advice (the model config, more ranks, more memory).
void check_fits_host_memory(double bytes, const std::string& what, const std::string& fix = "");

// "1.50 GiB" style (binary units).
std::string bytes_str(double bytes);

}  // namespace zt
