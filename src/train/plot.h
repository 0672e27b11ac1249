// `zerotrain plot OUTPUT_DIR`: a run's metrics.jsonl drawn as an SVG of four panels (the
// training loss with the validation losses, the learning rate, tokens/s and the gradient
// norm against the global step), self-contained (no fonts or scripts to fetch), for a
// browser or any SVG viewer.
#pragma once
#include <string>

namespace zt::train {

// The SVG of a metrics.jsonl file. BadInput naming the file when it is missing, holds no
// step records, or a line is not JSON.
std::string plot_metrics_svg(const std::string& metrics_path);

}  // namespace zt::train
