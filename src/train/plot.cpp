#include "train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/bounded_file.h"

namespace zt::train {
namespace {

namespace fs = std::filesystem;

struct Series {
  std::vector<double> x, y;
  void add(double step, const nlohmann::json& v) {
    if (v.is_number() && std::isfinite(v.get<double>())) x.push_back(step), y.push_back(v.get<double>());
  }
};

constexpr int kPanelW = 460, kPanelH = 260, kMargin = 52;
// A metrics.jsonl holds ~200 bytes a step: 1 GiB is millions of steps, and bounds a wrong path.
constexpr uint64_t kMetricsFileCap = 1ull << 30;

// Text as SVG character data: a path may hold <, & or quotes.
std::string xml_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, std::fabs(v) >= 1e4 || (std::fabs(v) < 1e-2 && v != 0) ? "%.3g" : "%.4g", v);
  return b;
}

// One panel at (ox, oy): axes with their ranges, `line` as a polyline, `dots` as circles.
std::string panel(int ox, int oy, const std::string& title, const Series& line, const Series& dots, double x_max) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series* s : {&line, &dots})
    for (double v : s->y) lo = std::min(lo, v), hi = std::max(hi, v);
  std::string out = "<g transform=\"translate(" + std::to_string(ox) + "," + std::to_string(oy) + ")\">\n";
  out += "<text x=\"" + std::to_string(kMargin) + "\" y=\"16\" font-size=\"14\" font-weight=\"bold\">" + title +
         "</text>\n";
  const int w = kPanelW - kMargin - 12, h = kPanelH - kMargin - 24;
  out += "<rect x=\"" + std::to_string(kMargin) + "\" y=\"24\" width=\"" + std::to_string(w) + "\" height=\"" +
         std::to_string(h) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  if (!std::isfinite(lo)) return out + "<text x=\"60\" y=\"60\" font-size=\"12\">no data</text>\n</g>\n";
  if (hi == lo) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.05), lo -= (hi - lo);
  const auto px = [&](double x) { return kMargin + w * (x_max > 0 ? x / x_max : 0); };
  const auto py = [&](double y) { return 24 + h * (1 - (y - lo) / (hi - lo)); };
  char b[96];
  const auto label = [&](double x, double y, const std::string& text, const char* anchor) {
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"%s\">", x, y, anchor);
    out += b + text + "</text>\n";
  };
  label(kMargin - 4, 24 + 10, num(hi), "end");
  label(kMargin - 4, 24 + h, num(lo), "end");
  label(kMargin, 24 + h + 14, "0", "start");
  label(kMargin + w, 24 + h + 14, num(x_max) + " steps", "end");
  if (!line.x.empty()) {
    out += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < line.x.size(); ++i) {
      std::snprintf(b, sizeof b, "%s%.1f,%.1f", i ? " " : "", px(line.x[i]), py(line.y[i]));
      out += b;
    }
    out += "\"/>\n";
  }
  for (size_t i = 0; i < dots.x.size(); ++i) {
    std::snprintf(b, sizeof b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#d62728\"/>\n", px(dots.x[i]),
                  py(dots.y[i]));
    out += b;
  }
  return out + "</g>\n";
}

}  // namespace

std::string plot_metrics_svg(const std::string& path) {
  std::string text;
  try {
    text = io::read_bounded_file(path, "metrics file", kMetricsFileCap);
  } catch (const Error& e) {
    // A missing file gets the hint of where one comes from.
    if (!fs::exists(fs::symlink_status(path)))
      ZT_THROW_INPUT(e.what(), " (a training run writes metrics.jsonl into its output_dir)");
    throw;
  }
  Series loss, val, lr, tps, norm;
  double x_max = 0;
  int line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    const bool whole = end != std::string::npos;  // a record cut off by a full disk has no newline
    if (!whole) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      // Only the last line may be torn (a write cut off by a full disk or a kill): what
      // came before is plotted. A bad line with a newline after it is damage, not a tear.
      if (!whole) {
        ZT_WARN(path, ":", line_no, ": the last record is cut off (", line.size(),
                " bytes with no end of line: a full disk or a killed run); plotting the records before it");
        break;
      }
      ZT_THROW_INPUT(path, ":", line_no, ": not a JSON record");
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    x_max = std::max(x_max, step);
    if (j.contains("val_loss")) val.add(step, j["val_loss"]);
    if (!j.contains("loss")) continue;
    loss.add(step, j["loss"]);
    if (j.contains("lr")) lr.add(step, j["lr"]);
    if (j.contains("tokens_per_s")) tps.add(step, j["tokens_per_s"]);
    if (j.contains("grad_norm")) norm.add(step, j["grad_norm"]);
  }
  if (loss.x.empty()) ZT_THROW_INPUT(path, ": no training step records to plot");
  const int W = 2 * kPanelW, H = 2 * kPanelH + 24;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(W) + "\" height=\"" +
                    std::to_string(H) + "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" " +
                    "fill=\"white\"/>\n";
  svg += "<text x=\"8\" y=\"16\" font-size=\"12\" fill=\"#555\">" + xml_text(path) + "</text>\n";
  const Series none;
  svg += panel(0, 24, "loss (blue: training, red: validation)", loss, val, x_max);
  svg += panel(kPanelW, 24, "learning rate", lr, none, x_max);
  svg += panel(0, 24 + kPanelH, "tokens/s", tps, none, x_max);
  svg += panel(kPanelW, 24 + kPanelH, "gradient norm", norm, none, x_max);
  return svg + "</svg>\n";
}

}  // namespace zt::train
