// Tensor parallelism's HF loader: one rank's shard of a field (model/weights.h's
// tensor_parallel_shard) read straight from the HF safetensors files, touching only the
// rank's bytes (io::SafetensorsReader::read_window): a row slice is one contiguous read, a
// column slice one strided read per row. Column-parallel fields (q/k/v, gate/up) take the
// rank's share of each packed row group from each HF tensor (q_proj, k_proj, v_proj are
// separate tensors in Llama files, one [in, 3C] Conv1D tensor in GPT-2's: its logical rows
// are the file's columns); row-parallel ones (o, down) the rank's input columns; vocabulary
// fields the rank's rows, its rows past the file's vocabulary (padding) zero.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/field.h"
#include "model/weights.h"

namespace zt::model {

class HfShardReader {
 public:
  // The files at `path` (hf_weight_files: a file, a directory, a sharded index).
  HfShardReader(const ModelConfig& config, const std::string& path);
  // Rank `rank` of `tp`'s shard of `field` of a unit ("embed", "block.<layer>", "head"), into
  // `out` (host, contiguous, a floating dtype), stored as the field is: OutIn [rows, cols],
  // InOut (GPT-2's Conv1D) [cols, rows], a vector [rows] (rows: the shard's packed rows).
  // BadInput naming the file and tensor when a file lacks it or its shape differs.
  void read(UnitKind kind, int64_t layer, Field field, int rank, int tp, const Tensor& out) const;

 private:
  // The reader holding the file tensor of a registry name, and its name in the file.
  std::pair<const io::SafetensorsReader*, std::string> find(const std::string& name) const;
  // Logical rows [begin, end) of `spec` (its own coordinates) and columns `cols` into out's
  // packed row `row` (of `out_rows`).
  void read_rows(const ParamSpec& spec, int64_t begin, int64_t end, RowSpan cols, const Tensor& out, int64_t row,
                 int64_t out_rows) const;

  ModelConfig config_;
  std::string path_;
  std::vector<std::unique_ptr<io::SafetensorsReader>> readers_;
};

}  // namespace zt::model
