// zerotrain plot OUTPUT_DIR [--out FILE]: a run's metrics.jsonl as an SVG (train/plot.h),
// and a PNG beside it when rsvg-convert is installed.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/subprocess.h"
#include "io/safetensors.h"
#include "train/plot.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain plot OUTPUT_DIR [--out FILE]

Draws a run's metrics.jsonl (OUTPUT_DIR/metrics.jsonl, or the file itself) as an SVG of
four panels against the global step: the training loss with the validation losses, the
learning rate, tokens/s and the gradient norm. Written to OUTPUT_DIR/metrics.svg (or
--out), and to a PNG beside it when rsvg-convert is installed.

  --out FILE   where the SVG goes
)";

int run_plot(const Args& args) {
  std::string out;
  std::vector<std::string> rest;
  ArgParser p("plot");
  p.value("--out", [&](const std::string& v) { out = v; });
  p.positional([&](const std::string& v) { rest.push_back(v); });
  p.parse(args);
  if (rest.size() != 1) ZT_THROW_INPUT("plot: give one run output directory (or its metrics.jsonl)");
  namespace fs = std::filesystem;
  const fs::path given(rest[0]);
  const fs::path metrics = fs::is_directory(given) ? given / "metrics.jsonl" : given;
  if (out.empty()) out = (metrics.parent_path() / "metrics.svg").string();
  const std::string svg = train::plot_metrics_svg(metrics.string());
  io::write_file_atomic(out, [&](std::FILE* f) { std::fputs(svg.c_str(), f); });
  std::printf("wrote %s\n", out.c_str());
  // The PNG: rsvg-convert started from an argument vector (core/subprocess.h), so the
  // paths reach it as they are, whatever quotes or `;` a folder name holds.
  const std::string rsvg = find_program("rsvg-convert");
  if (rsvg.empty()) return 0;
  const std::string png = fs::path(out).replace_extension(".png").string();
  const ProgramResult r = run_program({rsvg, "-o", png, out});
  if (r.ok()) {
    std::printf("wrote %s\n", png.c_str());
  } else {
    const std::string said = r.output.substr(0, r.output.find('\n'));
    ZT_WARN("rsvg-convert (", rsvg, ") could not write ", png, ": ", r.describe(), said.empty() ? "" : ": ", said,
            "; the SVG is complete");
  }
  return 0;
}

const Registrar registrar{{"plot", "draw a run's metrics.jsonl (loss, val loss, lr, tokens/s) as an SVG", run_plot, kHelp}};

}  // namespace
}  // namespace zt::cli
