// The HF slice loader (model/hf_tensor_parallel.h) against slicing the whole tensor: for
// the HF fixtures of every family (GPT-2: Conv1D [in, out] files, the packed c_attn, a tied
// head; Llama 3: separate q/k/v and gate/up tensors, GQA, an untied head; Qwen2: q/k/v
// biases, tied), every field of the embedding, a block and the head, at tp 2, each rank's
// shard read from the files equals take_shard of the fully loaded registry's view, bit for
// bit (both convert the same file values to f32), vocabulary padding rows zero. Also the
// window read itself (io::SafetensorsReader::read_window): rows, a column window, a
// converted dtype, and a window outside the tensor refused naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/tp_slice.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/hf_tensor_parallel.h"
#include "model/hf_weights.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace zt::model {
namespace {

std::string fixture(const std::string& family) { return std::string(ZT_SOURCE_DIR) + "/tests/data/hf/" + family; }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

void expect_shards_match(const std::string& family, int tp) {
  SCOPED_TRACE(family);
  const std::string dir = fixture(family);
  const ModelConfig c = load_hf_config(dir);
  Transformer m(c, ModelOptions{});
  load_hf_weights(m.registry(), c, dir);
  const HfShardReader reader(c, dir);
  const struct {
    UnitKind kind;
    const Unit& unit;
  } units[] = {{UnitKind::Embed, embed_unit(m.registry())},
               {UnitKind::Block, block_unit(m.registry(), 1)},
               {UnitKind::Head, head_unit(m.registry())}};
  int checked = 0;
  for (const auto& u : units) {
    const UnitWeights w(u.unit, Storage::Values);
    for (int f = 0; f < kFieldCount; ++f) {
      const Field field = static_cast<Field>(f);
      if (!w[field].has_data()) continue;
      for (int rank = 0; rank < tp; ++rank) {
        SCOPED_TRACE(std::string(field_name(field)) + " rank " + std::to_string(rank));
        const OwnedTensor want =
            testing::take_shard(w[field], w.layout(field), tensor_parallel_shard(c, field, rank, tp));
        OwnedTensor got(want->shape(), DType::F32);
        reader.read(u.kind, 1, field, rank, tp, got);
        EXPECT_TRUE(same_bits(got, want));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * 9);
}

TEST(HfTensorParallel, ShardsReadFromFilesEqualSlicesOfTheWholeTensor) {
  for (const char* family : {"gpt2", "llama3", "qwen2"}) expect_shards_match(family, 2);
}

TEST(HfTensorParallel, ReadWindowReadsRowsColumnsAndRefusesOutside) {
  testing::TempDir tmp(testing::system_temp_path("zt_hf_tp_"));
  const std::string path = (tmp.path() / "w.safetensors").string();
  OwnedTensor t({4, 5}, DType::F32);
  for (int i = 0; i < 20; ++i) t.data<float>()[i] = static_cast<float>(i);
  io::save_safetensors(path, {{"w", t}});
  const io::SafetensorsReader r(path);
  std::vector<float> rows(10);
  r.read_window("w", 1, 2, 0, 5, rows.data(), DType::F32, 5);
  EXPECT_EQ(rows, (std::vector<float>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}));
  std::vector<uint16_t> cols(6);
  r.read_window("w", 1, 3, 2, 2, cols.data(), DType::BF16, 2);
  std::vector<float> back(6);
  convert(cols.data(), DType::BF16, back.data(), DType::F32, 6);
  EXPECT_EQ(back, (std::vector<float>{7, 8, 12, 13, 17, 18}));
  try {
    r.read_window("w", 3, 2, 0, 5, rows.data(), DType::F32, 5);
    FAIL() << "a window past the last row was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt::model
