// `zerotrain bench io --path DIR`: the drive's bandwidth for NVMe offload's swap traffic
// (DeepSpeed's ds_io / ds_nvme_tune). Sweeps block size x queue depth x threads through
// io/async_io.h, reading and writing one file of --size bytes with O_DIRECT, next to a plain
// `dd oflag=direct` / `iflag=direct` (bs 1M) measured in the same run, and prints the best
// settings as a ds_config "aio" section to paste.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "io/async_io.h"

namespace zt::cli {

struct IoBenchOptions {
  std::string path;                   // the folder to test (nvme_path)
  size_t size = size_t{1} << 30;      // bytes of the test file
  std::vector<size_t> block_sizes = {256 << 10, 1 << 20, 4 << 20};
  std::vector<int> queue_depths = {1, 4, 16, 32};
  std::vector<int> threads = {1, 4};
  io::IoEngine engine = io::IoEngine::Auto;
  bool dd = true;                     // also time dd (when installed)
  std::string json_path;              // also write the rows as JSON
};

int run_io_bench(const IoBenchOptions& options);

}  // namespace zt::cli
