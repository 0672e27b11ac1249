// Pieces of ds_config parsing split by section (one file each); internal to train/.
#pragma once
#include <nlohmann/json.hpp>

#include "train/config_value.h"
#include "train/ds_config.h"

namespace zt::train::detail {

// "zero_optimization" (ds_config_zero.cpp).
void parse_zero_section(const nlohmann::json& doc, const Where& top, DsConfig& ds);

}  // namespace zt::train::detail
