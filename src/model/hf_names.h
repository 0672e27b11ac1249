// The HF name table of each family: which HF tensors hold which field (model/field.h), in
// registry order, and how that family's files differ (linear weight layout, buffers to
// skip, the hub's legacy name prefix). Adding a family's weights means adding a table here;
// the registry, HF load/save, checkpoints and ZeRO slices all follow from it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/weight_layout.h"
#include "model/config.h"
#include "model/field.h"

namespace zt::model {

struct HfField {
  Field field;
  // One HF tensor per row group of the field (q, k, v; gate, up), or one for the whole
  // field. Block names contain "{L}" for the layer index.
  std::vector<std::string> names;
};

struct HfNameTable {
  // Registry order within each unit (also the order of the flat buffer: checkpoints and
  // ZeRO slices depend on it). Fields the config does not have (a bias it turns off) are
  // skipped; a field the config needs and the table lacks is an error.
  std::vector<HfField> embed, block, head;
  WeightLayout linear_layout = WeightLayout::OutIn;  // how its files hold linear weights
  std::vector<std::string> skipped_suffixes;         // non-parameter buffers found in files
  std::string legacy_prefix;                         // dropped by old hub files ("transformer.")
  std::string layers_key;                            // config.json's layer count, for messages
  // The module path of block {L} ("transformer.h.{L}.", "model.layers.{L}."): the block
  // names above start with it, and PEFT's module paths (LoRA targets) are built from it.
  std::string block_prefix;
};

const HfNameTable& hf_name_table(Family family);
// table.block_prefix for one layer: "model.layers.3.".
std::string hf_block_prefix(const HfNameTable& table, int64_t layer);
const char* family_name(Family family);

}  // namespace zt::model
