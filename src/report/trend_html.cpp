// dcpctl report --html: one self-contained page drawn from the report's JSON (report/trend_report.h):
// inline CSS and SVG, no script, no font, no image, no link: nothing is fetched, it reads offline.
// Every plot is an <svg class="plot"> with data-series="N", N the series it draws, each series an
// element of class "series" (tests/browser/report_page_test.py counts them in a real browser).
// Sizes follow the groups, not the tensors: rows are layer groups, curves are kinds, so 60 layers of
// 384 experts over 100 steps draw 60 rows of 100 cells, not 23,040 of them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include "report/trend_report.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr size_t kMaxRows = 500;  // table rows shown; the rest are in --json

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, const char* f = "%.4g") {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::optional<double> val(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

std::string step_label(const json& s) {
  return s["step"].is_null() ? s["name"].get<std::string>() : std::to_string(s["step"].get<int64_t>());
}

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

// Blue (shrunk) - white - red (grew), t in [-1, 1].
std::string diverging(double t) {
  t = std::clamp(t, -1.0, 1.0);
  int r = t < 0 ? static_cast<int>(255 * (1 + t)) : 255, b = t > 0 ? static_cast<int>(255 * (1 - t)) : 255;
  int g = static_cast<int>(255 * (1 - std::fabs(t)));
  char o[16];
  std::snprintf(o, sizeof o, "#%02x%02x%02x", r, g, b);
  return o;
}

// White (small) to dark red (large), t in [0, 1].
std::string sequential(double t) {
  t = std::clamp(t, 0.0, 1.0);
  char o[16];
  std::snprintf(o, sizeof o, "#%02x%02x%02x", 255 - static_cast<int>(100 * t), static_cast<int>(255 * (1 - t)),
                static_cast<int>(255 * (1 - t)));
  return o;
}

struct Heat {
  std::string title, id, legend;  // legend: what the colour means, with its unit
  std::vector<std::string> rows;
  std::vector<std::vector<std::optional<double>>> cells;
  double lo = 0, hi = 1;  // the colour scale's ends (in scale units)
  bool diverging = false;
  std::function<double(double)> scale;  // value -> scale units
};

void heatmap(std::ostream& out, const Heat& h, const std::vector<std::string>& cols) {
  const int cw = std::max(6, std::min(40, 700 / static_cast<int>(std::max<size_t>(1, cols.size())))), ch = 14,
            left = 230, top = 30, bottom = 80;
  const int w = std::max(left + cw * static_cast<int>(cols.size()) + 20, left + 560),
            hgt = top + ch * static_cast<int>(h.rows.size()) + bottom;
  out << "<h2 id=\"" << h.id << "\">" << esc(h.title) << "</h2>\n<svg class=\"plot heatmap\" data-series=\""
      << h.rows.size() << "\" width=\"" << w << "\" height=\"" << hgt << "\" viewBox=\"0 0 " << w << ' ' << hgt
      << "\" role=\"img\">\n";
  out << "<text x=\"" << left << "\" y=\"18\" class=\"axis\">x: step, y: layer group; colour: " << esc(h.legend)
      << "</text>\n";
  for (size_t r = 0; r < h.rows.size(); ++r) {
    int y = top + ch * static_cast<int>(r);
    out << "<g class=\"series\"><text x=\"" << left - 4 << "\" y=\"" << y + 11 << "\" text-anchor=\"end\">"
        << esc(h.rows[r]) << "</text>";
    for (size_t c = 0; c < cols.size(); ++c) {
      const auto& v = h.cells[r][c];
      std::string fill = "#eeeeee", tip = "absent";
      if (v && !std::isfinite(*v)) {
        fill = "#000000";
        tip = num(*v);
      } else if (v) {
        double t = (h.scale(*v) - h.lo) / (h.hi - h.lo);
        fill = h.diverging ? diverging(2 * t - 1) : sequential(t);
        tip = num(*v);
      }
      out << "<rect x=\"" << left + cw * static_cast<int>(c) << "\" y=\"" << y << "\" width=\"" << cw - 1
          << "\" height=\"" << ch - 1 << "\" fill=\"" << fill << "\"><title>" << esc(h.rows[r]) << " @ step "
          << esc(cols[c]) << ": " << tip << "</title></rect>";
    }
    out << "</g>\n";
  }
  int ya = top + ch * static_cast<int>(h.rows.size());
  size_t every = std::max<size_t>(1, cols.size() / 12);
  for (size_t c = 0; c < cols.size(); c += every)
    out << "<text x=\"" << left + cw * static_cast<int>(c) + cw / 2 << "\" y=\"" << ya + 14
        << "\" text-anchor=\"middle\" class=\"tick\">" << esc(cols[c]) << "</text>";
  out << "<text x=\"" << left << "\" y=\"" << ya + 32 << "\" class=\"axis\">step</text>\n";
  // The colour legend: its two ends and the middle, in the scale's units; black NaN/Inf, grey absent.
  for (int k = 0; k <= 20; ++k) {
    double t = k / 20.0;
    out << "<rect x=\"" << left + 10 * k << "\" y=\"" << ya + 44 << "\" width=\"10\" height=\"10\" fill=\""
        << (h.diverging ? diverging(2 * t - 1) : sequential(t)) << "\"/>";
  }
  out << "<text x=\"" << left << "\" y=\"" << ya + 70 << "\" class=\"tick\">" << num(h.lo) << "</text><text x=\""
      << left + 210 << "\" y=\"" << ya + 70 << "\" text-anchor=\"end\" class=\"tick\">" << num(h.hi)
      << "</text><rect x=\"" << left + 230 << "\" y=\"" << ya + 44
      << "\" width=\"10\" height=\"10\" fill=\"#000\"/><text x=\"" << left + 244 << "\" y=\"" << ya + 53
      << "\" class=\"tick\">NaN/Inf</text><rect x=\"" << left + 310 << "\" y=\"" << ya + 44
      << "\" width=\"10\" height=\"10\" fill=\"#eee\"/><text x=\"" << left + 324 << "\" y=\"" << ya + 53
      << "\" class=\"tick\">absent/undefined</text>\n</svg>\n";
}

struct Curves {
  std::string title, id, ylabel;
  std::vector<std::string> names;
  std::vector<std::vector<std::optional<double>>> ys;
};

// Log-scale curves over the steps; non-positive and non-finite points break the line (NaN/Inf
// points are marked with a cross at the top).
void curves(std::ostream& out, const Curves& c, const std::vector<std::string>& cols) {
  const int left = 70, top = 20, pw = 640, ph = 260, w = left + pw + 200, h = top + ph + 50;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : c.ys)
    for (const auto& v : s)
      if (v && std::isfinite(*v) && *v > 0) lo = std::min(lo, *v), hi = std::max(hi, *v);
  if (!(lo <= hi)) lo = 1e-3, hi = 1;
  double l0 = std::floor(std::log10(lo)), l1 = std::ceil(std::log10(hi));
  if (l1 <= l0) l1 = l0 + 1;
  auto X = [&](size_t i) {
    return left + (cols.size() > 1 ? pw * static_cast<double>(i) / (cols.size() - 1) : pw / 2.0);
  };
  auto Y = [&](double v) { return top + ph * (1 - (std::log10(v) - l0) / (l1 - l0)); };
  out << "<h2 id=\"" << c.id << "\">" << esc(c.title) << "</h2>\n<svg class=\"plot curves\" data-series=\""
      << c.names.size() << "\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << ' ' << h
      << "\" role=\"img\">\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (double e = l0; e <= l1; e += 1)
    out << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(std::pow(10, e)) << "\" y2=\""
        << Y(std::pow(10, e)) << "\" stroke=\"#ddd\"/><text x=\"" << left - 4 << "\" y=\"" << Y(std::pow(10, e)) + 4
        << "\" text-anchor=\"end\" class=\"tick\">1e" << e << "</text>";
  size_t every = std::max<size_t>(1, cols.size() / 12);
  for (size_t i = 0; i < cols.size(); i += every)
    out << "<text x=\"" << X(i) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\" class=\"tick\">"
        << esc(cols[i]) << "</text>";
  // The y axis's title centred on the plot, "(log scale)" a line of its own beside it: the longest
  // titles ("RMS(m) / sqrt(mean(v))") with it on one line ran past the top of the picture.
  out << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 36 << "\" class=\"axis\">step</text>";
  for (const auto& [x, text] : {std::pair<int, std::string>{14, c.ylabel}, {28, "(log scale)"}})
    out << "<text x=\"" << x << "\" y=\"" << top + ph / 2
        << "\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 " << x << ' ' << top + ph / 2 << ")\">"
        << esc(text) << "</text>";
  out << "\n";
  for (size_t s = 0; s < c.names.size(); ++s) {
    std::string d, marks;
    bool pen = false;
    for (size_t i = 0; i < c.ys[s].size(); ++i) {
      const auto& v = c.ys[s][i];
      if (v && !std::isfinite(*v)) marks += "M" + num(X(i) - 4, "%.1f") + " " + num(top - 4.0) + "l8 8m0 -8l-8 8";
      if (!v || !std::isfinite(*v) || *v <= 0) {
        pen = false;
        continue;
      }
      d += (pen ? "L" : "M") + num(X(i), "%.1f") + " " + num(Y(*v), "%.1f") + "h0.01";
      pen = true;
    }
    const char* col = kPalette[s % (sizeof kPalette / sizeof *kPalette)];
    out << "<g class=\"series\"><path d=\"" << d << marks << "\" fill=\"none\" stroke=\"" << col
        << "\" stroke-width=\"2\" stroke-linecap=\"round\"><title>" << esc(c.names[s]) << "</title></path>"
        << "<rect x=\"" << left + pw + 12 << "\" y=\"" << top + 16 * s << "\" width=\"12\" height=\"12\" fill=\"" << col
        << "\"/><text x=\"" << left + pw + 28 << "\" y=\"" << top + 16 * s + 10 << "\">" << esc(c.names[s])
        << "</text></g>\n";
  }
  out << "</svg>\n";
}

std::vector<std::optional<double>> column(const json& arr) {
  std::vector<std::optional<double>> out;
  for (const auto& v : arr) out.push_back(val(v));
  return out;
}

// Rows of layer groups: each group's norm relative to its first step, and its update ratio.
void layer_heatmaps(std::ostream& out, const json& j, const std::vector<std::string>& cols) {
  Heat norm, upd;
  norm.title = "Weight norm by layer group, relative to its first step";
  norm.id = "norms";
  norm.legend = "log2(||W_t|| / ||W_first||): red grew, blue shrank, +1 = doubled";
  upd.title = "Update ratio by layer group";
  upd.id = "updates";
  upd.legend = "log10(||W_t - W_t-1|| / ||W_t-1||)";
  norm.lo = -2, norm.hi = 2, norm.diverging = true;
  norm.scale = [](double v) { return std::log2(v); };
  upd.scale = [](double v) { return v > 0 ? std::log10(v) : -INFINITY; };
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& g : j["groups"]["layer"]) {
    norm.rows.push_back(g["name"].get<std::string>());
    upd.rows.push_back(g["name"].get<std::string>());
    auto l2 = column(g["series"]["l2"]);
    std::optional<double> first;
    for (const auto& v : l2)
      if (v && std::isfinite(*v) && *v > 0) {
        first = v;
        break;
      }
    std::vector<std::optional<double>> rel;
    for (const auto& v : l2) rel.push_back(v && first ? std::optional<double>(*v / *first) : std::nullopt);
    norm.cells.push_back(rel);
    upd.cells.push_back(column(g["series"]["update_ratio"]));
    for (const auto& v : upd.cells.back())
      if (v && std::isfinite(*v) && *v > 0) lo = std::min(lo, std::log10(*v)), hi = std::max(hi, std::log10(*v));
  }
  upd.lo = std::isfinite(lo) ? std::floor(lo) : -4;
  upd.hi = std::isfinite(hi) ? std::max(upd.lo + 1, std::ceil(hi)) + 0.0 : 0;  // + 0.0: no "-0"
  heatmap(out, norm, cols);
  heatmap(out, upd, cols);
}

void kind_curves(std::ostream& out, const json& j, const std::vector<std::string>& cols) {
  Curves upd{"Update ratio by kind", "kinds", "||W_t - W_t-1|| / ||W_t-1||", {}, {}};
  for (const auto& g : j["groups"]["kind"]) {
    upd.names.push_back(g["name"].get<std::string>());
    upd.ys.push_back(column(g["series"]["update_ratio"]));
  }
  curves(out, upd, cols);
  Curves eff{"Adam: effective step per unit learning rate, by kind", "adam-step", "RMS(m) / sqrt(mean(v))", {}, {}};
  Curves v{"Adam: RMS of the second moment (exp_avg_sq), by kind", "adam-v", "RMS(exp_avg_sq)", {}, {}};
  for (const auto& g : j["optimizer"]["kind"]) {
    eff.names.push_back(g["name"].get<std::string>());
    eff.ys.push_back(column(g["effective_step"]));
    v.names.push_back(g["name"].get<std::string>());
    v.ys.push_back(column(g["exp_avg_sq_rms"]));
  }
  if (eff.names.empty()) {
    out << "<h2 id=\"adam-step\">Adam's state</h2><p>No exp_avg / exp_avg_sq in these checkpoints.</p>\n";
    return;
  }
  curves(out, eff, cols);
  curves(out, v, cols);
}

void tables(std::ostream& out, const json& j) {
  out << "<h2 id=\"movers\">Top movers (largest update ratio of each weight)</h2>\n<table class=\"movers\"><tr><th>"
         "tensor</th><th>group</th><th>kind</th><th>max update ratio</th><th>at step</th></tr>\n";
  for (const auto& m : j["top_movers"])
    out << "<tr><td>" << esc(m["key"].get<std::string>()) << "</td><td>" << esc(m["group"].get<std::string>())
        << "</td><td>" << esc(m["kind"].get<std::string>()) << "</td><td>" << num(*val(m["max_update_ratio"]))
        << "</td><td>" << esc(m["name"].get<std::string>()) << "</td></tr>\n";
  out << "</table>\n<h2 id=\"anomalies\">Anomalies (" << j["anomalies"].size()
      << "), each tensor's first step</h2>\n<table class=\"anomalies\"><tr><th>step</th><th>anomaly</th><th>tensor"
         "</th><th>value</th></tr>\n";
  size_t shown = 0;
  for (const auto& a : j["anomalies"]) {
    if (shown++ == kMaxRows) break;
    out << "<tr><td>" << esc(a["name"].get<std::string>()) << "</td><td>" << esc(a["anomaly"].get<std::string>())
        << "</td><td>" << esc(a["key"].get<std::string>()) << "</td><td>" << num(*val(a["value"])) << "</td></tr>\n";
  }
  out << "</table>\n";
  if (j["anomalies"].size() > kMaxRows)
    out << "<p>" << j["anomalies"].size() - kMaxRows << " more in <code>dcpctl report --json</code>.</p>\n";
}

const char* kStyle =
    "body{font:14px sans-serif;margin:1.5em;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:1.6em}"
    "svg{display:block;font-size:11px}.axis{font-size:12px;fill:#333}.tick{font-size:10px;fill:#555}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
    ".bad{color:#b00;font-weight:bold}.ok{color:#070}";

void summary(std::ostream& out, const json& j) {
  out << "<h1>dcpctl report" << (j["run"].is_null() ? "" : ": " + esc(j["run"].get<std::string>())) << "</h1>\n<p>"
      << j["steps"].size() << " steps, " << j["groups"]["layer"].size() << " layer groups, " << j["anomalies"].size()
      << " anomalies";
  if (!j["gates"]["conditions"].empty())
    out << "; gates "
        << (j["gates"]["ok"].get<bool>() ? "<span class=\"ok\">passed</span>" : "<span class=\"bad\">failed</span>");
  out << ".</p>\n";
  if (!j["anomalies"].empty()) {
    const json& a = j["anomalies"][0];
    out << "<p class=\"bad\">First anomaly: " << esc(a["anomaly"].get<std::string>()) << " in "
        << esc(a["key"].get<std::string>()) << " (layer group " << esc(a["group"].get<std::string>()) << ") at step "
        << esc(a["name"].get<std::string>()) << ".</p>\n";
  }
  for (const auto& a : j["anomalies"])
    if (a["anomaly"] == "nan" || a["anomaly"] == "inf") {
      out << "<p class=\"bad\">First " << (a["anomaly"] == "nan" ? "NaN" : "Inf") << ": "
          << esc(a["key"].get<std::string>()) << " at step " << esc(a["name"].get<std::string>()) << ".</p>\n";
      break;
    }
}

}  // namespace

std::string trend_html(const json& j) {
  std::ostringstream out;
  std::vector<std::string> cols;
  for (const auto& s : j["steps"]) cols.push_back(step_label(s));
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>dcpctl report</title>"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
         "<style>"
      << kStyle << "</style></head><body>\n";
  summary(out, j);
  layer_heatmaps(out, j, cols);
  kind_curves(out, j, cols);
  tables(out, j);
  out << "<p class=\"tick\">Figures as <code>dcpctl report --json</code> (schema_version "
      << j["schema_version"].get<int>()
      << ") gives them; docs/report.md says how each is computed.</p>\n</body></html>\n";
  return out.str();
}

}  // namespace dcpctl
