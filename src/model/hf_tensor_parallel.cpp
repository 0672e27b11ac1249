// One rank's tensor-parallel shard from HF files (see hf_tensor_parallel.h).
#include "model/hf_tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/strings.h"
#include "model/hf_names.h"
#include "model/hf_weights.h"

namespace zt::model {

HfShardReader::HfShardReader(const ModelConfig& config, const std::string& path) : config_(config), path_(path) {
  for (const std::string& f : hf_weight_files(path)) readers_.push_back(std::make_unique<io::SafetensorsReader>(f));
}

std::pair<const io::SafetensorsReader*, std::string> HfShardReader::find(const std::string& name) const {
  const std::string& prefix = hf_name_table(config_.family).legacy_prefix;
  for (const auto& r : readers_) {
    if (r->contains(name)) return {r.get(), name};
    // Old hub files (the original gpt2's) drop the family's prefix.
    if (!prefix.empty() && starts_with(name, prefix) && r->contains(name.substr(prefix.size())))
      return {r.get(), name.substr(prefix.size())};
  }
  ZT_THROW_INPUT(path_, ": tensor '", name, "' is missing from the weights");
}

void HfShardReader::read_rows(const ParamSpec& spec, int64_t begin, int64_t end, RowSpan cols, const Tensor& out,
                              int64_t row, int64_t out_rows) const {
  const auto [reader, fname] = find(spec.name);
  const HfTensorLayout l = hf_layout(config_, spec);
  if (reader->info(fname).shape != l.shape)
    ZT_THROW_INPUT(reader->path(), ": tensor '", fname, "' has shape ", shape_str(reader->info(fname).shape),
                   ", expected ", shape_str(l.shape), " for this config");
  if (l.transposed)
    ZT_THROW_UNSUPPORTED(reader->path(), ": tensor '", fname, "': tensor-parallel slices of a transposed file layout");
  const size_t es = dtype_size(out.dtype());
  auto* base = static_cast<char*>(out.data());
  if (spec.layout == WeightLayout::InOut) {  // the file's [in, out]: logical rows are its columns
    reader->read_window(fname, cols.begin, cols.size(), begin, end - begin, base + static_cast<size_t>(row) * es,
                        out.dtype(), out_rows);
    return;
  }
  // OutIn or a vector: rows past the file's (vocabulary padding) are zero.
  const bool vector = spec.shape.size() == 1;
  const int64_t width = vector ? 1 : cols.size();
  const int64_t file_end = std::min(end, l.shape[0]);
  char* at = base + static_cast<size_t>(row * width) * es;
  if (file_end > begin)
    reader->read_window(fname, begin, file_end - begin, vector ? 0 : cols.begin, width, at, out.dtype(), width);
  const int64_t zero_rows = end - std::max(begin, file_end);
  if (zero_rows > 0)
    std::memset(at + static_cast<size_t>((std::max(begin, file_end) - begin) * width) * es, 0,
                static_cast<size_t>(zero_rows * width) * es);
}

void HfShardReader::read(UnitKind kind, int64_t layer, Field field, int rank, int tp, const Tensor& out) const {
  std::vector<ParamSpec> specs;
  for (const ParamSpec& s : unit_specs(config_, kind, layer))
    if (s.field == field) specs.push_back(s);
  ZT_CHECK(!specs.empty(), "HfShardReader: the unit has no field ", field_name(field));
  const TensorParallelShard shard = tensor_parallel_shard(config_, field, rank, tp);
  int64_t rows = 0;
  for (const RowSpan& r : shard.rows) rows += r.size();
  const bool in_out = specs[0].layout == WeightLayout::InOut, vector = specs[0].shape.size() == 1;
  const Shape want = vector ? Shape{rows} : in_out ? Shape{shard.cols.size(), rows} : Shape{rows, shard.cols.size()};
  ZT_CHECK(out.shape() == want && out.is_contiguous() && out.device().is_cpu() && is_floating(out.dtype()),
           "HfShardReader: out must be a contiguous host floating ", shape_str(want), " for ", field_name(field),
           ", got ", shape_str(out.shape()));
  int64_t out_row = 0;
  for (const RowSpan& span : shard.rows) {
    // The field's tensors in order, each covering its logical rows of the field.
    int64_t field_at = 0;
    for (const ParamSpec& s : specs) {
      const int64_t n = in_out ? s.shape[1] : s.shape[0];
      const int64_t b = std::max(span.begin, field_at), e = std::min(span.end, field_at + n);
      if (b < e) read_rows(s, b - field_at, e - field_at, shard.cols, out, out_row + (b - span.begin), rows);
      field_at += n;
    }
    out_row += span.size();
  }
}

}  // namespace zt::model
