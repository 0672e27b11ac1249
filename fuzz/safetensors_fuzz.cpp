// Fuzz target: any bytes as a safetensors file. Opening must either fail with BadInput or
// yield tensors whose every byte lies inside the mapping (all of them are read here, so
// AddressSanitizer or a segfault catches an out-of-bounds view).
#include <cstdlib>
#include <exception>

#include "core/error.h"
#include "core/tensor.h"
#include "fuzz_driver.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = zt::fuzz::scratch_path(".safetensors");
  zt::fuzz::write_file(path, data, size);
  try {
    zt::io::SafetensorsReader r(path);
    uint64_t sum = 0;
    for (const auto& name : r.names()) {
      const zt::io::TensorInfo& info = r.info(name);
      const uint8_t* p = r.bytes(name);
      for (uint64_t i = 0; i < info.end - info.begin; ++i) sum += p[i];
      if (info.supported) (void)r.tensor(name).numel();
    }
    for (const auto& kv : r.metadata()) sum += kv.first.size() + kv.second.size();
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const zt::Error& e) {
    if (e.kind() == zt::ErrorKind::Internal) std::abort();  // a CHECK fired: a bug, not bad input
  }
  return 0;
}

namespace zt::fuzz {
std::vector<std::string> seeds() {
  // A small valid file with every supported dtype and metadata, written by our writer.
  const std::string path = scratch_path(".seed.safetensors");
  OwnedTensor a({2, 3}, DType::F32), b({4}, DType::BF16), c({3}, DType::F16), d({2}, DType::I32), e({1}, DType::I64);
  for (const OwnedTensor* t : {&a, &b, &c}) (*t)->fill_f32(1.5f);
  io::save_safetensors(path, {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"e", e}}, {{"format", "pt"}});
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::string bytes;
  char buf[4096];
  for (size_t n; f && (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  if (f) std::fclose(f);
  std::remove(path.c_str());
  std::string empty_header = std::string("\x02\0\0\0\0\0\0\0{}", 10);
  return {bytes, empty_header};
}
}  // namespace zt::fuzz
