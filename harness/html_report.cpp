// html_report.cpp: the self-contained HTML report (see html_report.h). Charts are hand-written SVG
// (no script, no fonts, no network), laid out for a 1000 px wide column.
#include "harness/html_report.h"

#include "fixtures/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "harness/lineup.h"
#include "harness/report_view.h"
#include "harness/stats.h"

namespace nibble {

using json = nlohmann::ordered_json;

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : utf8_text(s)) {  // the page declares UTF-8: a report file's name is any bytes
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::vector<ErrorAnchor> error_anchors(const ReportView& report, const std::vector<ErrorAnchor>& task_anchors) {
  const CalibrationView& c = report.calibration;
  if (!c.rows.empty()) return c.rows;
  // nibble grade's summary of the table: the two variants either side of the gate.
  std::vector<ErrorAnchor> a;
  if (!std::isnan(c.legitimate_variants_worst)) a.push_back({"worst legitimate variant", c.legitimate_variants_worst, true});
  if (std::isfinite(c.dropped_feature_variants_best))
    a.push_back({"best dropped-feature variant", c.dropped_feature_variants_best, false});
  return a.empty() ? task_anchors : a;
}

namespace {

std::string f1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

/** Times in microseconds: one decimal (CUPTI's resolution is finer, the noise is not). */
std::string us_str(double v) {
  if (std::isnan(v)) return "n/a";
  return v >= 100 ? fixed(v, 1) : fmt_g(v, 4);
}

std::string err_str(double e) {
  if (std::isnan(e)) return "NaN";
  if (e == 0) return "0";
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", e);
  return b;
}

/** Round tick values, about `target` of them, covering [lo, hi] (1, 2, 5 x 10^k steps). */
std::vector<double> nice_ticks(double lo, double hi, int target = 6) {
  std::vector<double> t;
  if (!(hi > lo)) {
    t.push_back(lo);
    return t;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // At most a few dozen ticks, and none once the step is below v's precision (lo ~ 1e16, hi - lo ~ 1:
  // v += step would not move).
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9 && t.size() < 64; v += step) {
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    if (!(v + step > v)) break;
  }
  return t;
}

std::string tick_label(double v) {
  if (std::fabs(v) >= 1e5 || (v != 0 && std::fabs(v) < 1e-3)) return fmt_g(v, 3);
  std::string s = fixed(v, 3);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// --- SVG primitives: every element closed, every attribute quoted, every text escaped. ---
std::string svg_open(int w, int h, const std::string& label) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" + std::to_string(h) +
         "\" viewBox=\"0 0 " + std::to_string(w) + " " + std::to_string(h) + "\" role=\"img\" aria-label=\"" +
         html_escape(label) + "\">\n";
}
std::string line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
                 const std::string& extra = "") {
  return "<line x1=\"" + f1(x1) + "\" y1=\"" + f1(y1) + "\" x2=\"" + f1(x2) + "\" y2=\"" + f1(y2) + "\" stroke=\"" + stroke +
         "\" stroke-width=\"" + fmt_g(width) + "\"" + (extra.empty() ? "" : " " + extra) + "/>\n";
}
std::string rect(double x, double y, double w, double h, const std::string& fill, const std::string& extra = "") {
  return "<rect x=\"" + f1(x) + "\" y=\"" + f1(y) + "\" width=\"" + f1(std::max(0.0, w)) + "\" height=\"" + f1(std::max(0.0, h)) +
         "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra) + "/>\n";
}
std::string circle(double x, double y, double r, const std::string& fill, const std::string& extra = "") {
  return "<circle cx=\"" + f1(x) + "\" cy=\"" + f1(y) + "\" r=\"" + fmt_g(r) + "\" fill=\"" + fill + "\"" +
         (extra.empty() ? "" : " " + extra) + "/>\n";
}
std::string text(double x, double y, const std::string& s, const std::string& anchor = "start", int size = 12,
                 const std::string& fill = "#222", const std::string& extra = "") {
  return "<text x=\"" + f1(x) + "\" y=\"" + f1(y) + "\" text-anchor=\"" + anchor + "\" font-size=\"" + std::to_string(size) +
         "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra) + ">" + html_escape(s) + "</text>\n";
}
std::string title(const std::string& s) { return "<title>" + html_escape(s) + "</title>"; }

const char* kPass = "#2e7d32";
const char* kFail = "#c62828";
const char* kCand = "#1565c0";
const char* kBase = "#ef6c00";
const char* kFloor = "#616161";
const char* kAnchor = "#6a1b9a";

/** Width of a label in px at font-size 11, near enough to keep labels apart. */
double label_width(const std::string& s, int size = 11) { return 0.58 * size * double(s.size()); }

// --- 1. The error against the gate, log scale. ---
std::string error_chart(const ReportView& report, const std::vector<ErrorAnchor>& anchors) {
  const double gate = report.gate;
  const double w = report.worst_rel_err;
  const bool nan = std::isnan(w) && report.worst_rel_err_recorded;  // null: NaN/Inf output
  double lo_e = -7, hi_e = 2;  // decades
  auto decade = [](double v) { return std::log10(v); };
  if (w > 0 && std::isfinite(w)) lo_e = std::min(lo_e, std::floor(decade(w))), hi_e = std::max(hi_e, std::ceil(decade(w)));
  for (const auto& a : anchors)
    if (a.worst_rel_err > 0 && std::isfinite(a.worst_rel_err)) hi_e = std::max(hi_e, std::ceil(decade(a.worst_rel_err)));
  const int W = 1000, L = 60, R = 940;
  const double axis_y = 100;
  auto X = [&](double v) {
    if (!(v > 0)) return double(L);
    if (!std::isfinite(v)) return double(R);
    return L + (std::log10(v) - lo_e) / (hi_e - lo_e) * (R - L);
  };
  std::ostringstream o;
  if (!std::isnan(gate)) {
    o << rect(L, axis_y - 34, X(gate) - L, 34, kPass, "fill-opacity=\"0.10\"");
    o << rect(X(gate), axis_y - 34, R - X(gate), 34, kFail, "fill-opacity=\"0.10\"");
    o << text((L + X(gate)) / 2, axis_y - 40, "passes the gate", "middle", 11, kPass);
    o << text((X(gate) + R) / 2, axis_y - 40, "fails the gate", "middle", 11, kFail);
  }
  o << line(L, axis_y, R, axis_y, "#444");
  for (int e = int(lo_e); e <= int(hi_e); ++e) {
    const double x = X(std::pow(10, e));
    o << line(x, axis_y, x, axis_y + 5, "#444");
    o << text(x, axis_y + 18, "1e" + std::to_string(e), "middle", 10, "#555");
  }
  o << text((L + R) / 2.0, axis_y + 34, "worst relative error ||out - ref|| / ||ref|| (log scale)", "middle", 11, "#555");
  if (!std::isnan(gate)) {
    o << line(X(gate), axis_y - 52, X(gate), axis_y + 5, kFail, 2, "stroke-dasharray=\"4 3\"");
    o << text(X(gate) + 4, axis_y - 54, "gate " + err_str(gate), "start", 11, kFail, "font-weight=\"bold\"");
  }
  // Reference points under the axis, labels spread over rows so they never overlap.
  // Connectors first, labels last with a white halo, so no line crosses a label's text.
  std::vector<double> row_end;
  std::ostringstream labels;
  std::vector<size_t> order(anchors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return anchors[a].worst_rel_err < anchors[b].worst_rel_err; });
  for (size_t i : order) {
    const auto& a = anchors[i];
    const double x = X(a.worst_rel_err);
    const std::string lab = a.name + " " + err_str(a.worst_rel_err);
    const double lw = label_width(lab, 10);
    const double start = std::min(std::max(x - lw / 2, 2.0), W - lw - 2);
    size_t row = 0;
    while (row < row_end.size() && start < row_end[row] + 6) ++row;
    if (row == row_end.size()) row_end.push_back(0);
    row_end[row] = start + lw;
    const double ly = axis_y + 52 + 14.0 * double(row);
    const char* col = a.must_pass ? kPass : kFail;
    o << line(x, axis_y, x, ly - 10, col, 1, "stroke-opacity=\"0.5\"");
    o << "<path d=\"M " << f1(x) << " " << f1(axis_y - 5) << " l 5 5 l -5 5 l -5 -5 z\" fill=\"" << col << "\">"
      << title(lab + (a.must_pass ? " (must pass)" : " (must fail)")) << "</path>\n";
    labels << text(start + lw / 2, ly, lab, "middle", 10, col, "stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\"");
  }
  o << labels.str();
  // The candidate, above the axis.
  const bool unchecked = std::isnan(w) && !nan;  // no outputs were compared (the grade stopped before)
  const double cx = nan ? R : unchecked ? L : X(w);
  const std::string clab = unchecked ? "this solution: not checked" : nan ? "this solution: NaN/Inf" : w == 0 ? "this solution: 0 (bit-exact)"
                                                                    : "this solution: " + err_str(w) +
                                                                          (std::isnan(gate) ? "" : " (" + fmt_g(w / gate, 2) + "x the gate)");
  o << circle(cx, axis_y - 14, 7, kCand, "stroke=\"#fff\" stroke-width=\"2\"");
  const double clw = label_width(clab, 12);
  const double cstart = std::min(std::max(cx - clw / 2, 2.0), W - clw - 2);
  o << text(cstart + clw / 2, axis_y - 70, clab, "middle", 12, kCand, "font-weight=\"bold\"");
  o << line(cx, axis_y - 66, cx, axis_y - 22, kCand, 1);
  // Tall enough for every row of labels (a calibration table puts several mutants near 1.4).
  const int H = std::max(200, int(axis_y + 52 + 14.0 * double(row_end.size()) + 8));
  return svg_open(W, H, "worst relative error against the gate, log scale") + o.str() + "</svg>\n";
}

/** Median per position: (position, median of the samples there), in position order. */
std::vector<std::pair<double, double>> per_position_median(const ReportView& report) {
  const std::vector<double>& samples = report.gpu_span_us.samples;
  const std::vector<double>& pos = report.positions;
  std::map<long long, std::vector<double>> by;
  if (pos.size() != samples.size()) return {};
  for (size_t i = 0; i < samples.size(); ++i)
    if (std::isfinite(pos[i])) by[(long long)pos[i]].push_back(samples[i]);
  std::vector<std::pair<double, double>> out;
  for (auto& [p, v] : by) out.push_back({double(p), median_of(v)});
  return out;
}

// --- 2. Time per sample across the positions (decode: the KV length grows the attention work). ---
std::string positions_chart(const ReportView& report, const ReportView* base) {
  const std::vector<double>& samples = report.gpu_span_us.samples;
  const auto med = per_position_median(report);
  if (med.empty()) return "<p class=\"note\">The report has no per-position samples.</p>\n";
  std::vector<std::pair<double, double>> bmed;
  if (base) bmed = per_position_median(*base);
  double lo = *std::min_element(samples.begin(), samples.end()), hi = *std::max_element(samples.begin(), samples.end());
  // BASE shares the scale only when that keeps the candidate readable (a 2x gap would flatten both).
  bool show_base = false;
  if (!bmed.empty()) {
    double blo = bmed.front().second, bhi = blo;
    for (auto& [p, m] : bmed) blo = std::min(blo, m), bhi = std::max(bhi, m);
    const double nlo = std::min(lo, blo), nhi = std::max(hi, bhi);
    if ((nhi - nlo) <= 3 * (hi - lo) + 0.05 * hi) {
      show_base = true;
      lo = nlo;
      hi = nhi;
    }
  }
  const double pad = std::max((hi - lo) * 0.08, hi * 0.002);
  lo -= pad;
  hi += pad;
  // Half a position of margin each side, so the first and last calls sit off the axes.
  const double p0 = med.front().first - 0.5, p1 = med.back().first + 0.5;
  const int W = 1000, H = 300, L = 70, R = 970, T = 20, B = 250;
  auto X = [&](double p) { return L + (p - p0) / (p1 - p0) * (R - L); };
  auto Y = [&](double us) { return B - (us - lo) / (hi - lo) * (B - T); };
  std::ostringstream o;
  const std::string noun = sample_noun(report.unit);
  o << svg_open(W, H, "GPU span per " + noun + " against the position");
  for (double v : nice_ticks(lo, hi, 6)) {
    o << line(L, Y(v), R, Y(v), "#e0e0e0");
    o << text(L - 6, Y(v) + 4, tick_label(v), "end", 10, "#555");
  }
  for (double p : nice_ticks(p0, p1, 8)) {
    o << line(X(p), B, X(p), B + 5, "#444");
    o << text(X(p), B + 18, tick_label(p), "middle", 10, "#555");
  }
  o << line(L, B, R, B, "#444") << line(L, T, L, B, "#444");
  o << text((L + R) / 2.0, B + 38, "position of the timed " + noun + " (KV length)", "middle", 11, "#555");
  o << text(14, (T + B) / 2.0, "GPU span per " + noun + " (us)", "middle", 11, "#555",
            "transform=\"rotate(-90 14 " + f1((T + B) / 2.0) + ")\"");
  for (size_t i = 0; i < samples.size(); ++i)
    if (std::isfinite(report.positions[i]))
      o << circle(X(report.positions[i]), Y(samples[i]), 2.2, kCand, "fill-opacity=\"0.30\"");
  auto polyline = [&](const std::vector<std::pair<double, double>>& m, const char* col, const std::string& name) {
    std::string pts;
    for (auto& [p, v] : m) pts += f1(X(p)) + "," + f1(Y(v)) + " ";
    o << "<polyline points=\"" << pts << "\" fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\">" << title(name)
      << "</polyline>\n";
  };
  if (show_base) polyline(bmed, kBase, "BASE median per position");
  polyline(med, kCand, "median per position");
  // Legend.
  o << circle(L + 20, T + 8, 3, kCand, "fill-opacity=\"0.4\"") << text(L + 28, T + 12, "each timed call", "start", 11);
  o << line(L + 140, T + 8, L + 165, T + 8, kCand, 2) << text(L + 170, T + 12, "median per position", "start", 11);
  if (show_base)
    o << line(L + 310, T + 8, L + 335, T + 8, kBase, 2) << text(L + 340, T + 12, "BASE median per position", "start", 11);
  o << "</svg>\n";
  if (!bmed.empty() && !show_base) {
    return o.str() + "<p class=\"note\">BASE (median " + html_escape(us_str(median_of(base->gpu_span_us.samples))) +
           " us) is off this scale; the roofline bar and the comparison above have it.</p>\n";
  }
  return o.str();
}

// --- 3. The distribution of the samples: a histogram, and with a base a strip plot on one axis. ---
std::string histogram_chart(const ReportView& report) {
  std::vector<double> s = report.gpu_span_us.samples;
  std::sort(s.begin(), s.end());
  const Summary sm = summarize(s);
  // About 2 sqrt(n) bins: the samples are mostly one tight mode plus a few slow outliers.
  const int bins = std::clamp(int(std::ceil(2 * std::sqrt(double(s.size())))), 12, 48);
  double lo = sm.min, hi = sm.max;
  if (!(hi > lo)) {  // one value: a bin around it, wide enough to be representable at its magnitude
    const double pad = std::max(0.5, std::fabs(lo) * 1e-6);
    lo -= pad, hi += pad;
  }
  const double bw = (hi - lo) / bins;
  std::vector<int> count(size_t(bins), 0);
  for (double v : s) {
    const double k = (v - lo) / bw;
    count[size_t(std::isfinite(k) ? std::clamp(k, 0.0, double(bins - 1)) : 0.0)]++;
  }
  const int cmax = *std::max_element(count.begin(), count.end());
  const int W = 1000, H = 260, L = 70, R = 970, T = 30, B = 210;
  auto X = [&](double v) { return L + (v - lo) / (hi - lo) * (R - L); };
  auto Y = [&](double c) { return B - c / cmax * (B - T); };
  std::ostringstream o;
  o << svg_open(W, H, "histogram of the GPU span samples");
  o << rect(X(sm.q1), T - 6, X(sm.q3) - X(sm.q1), B - T + 6, kCand, "fill-opacity=\"0.08\"");
  for (int i = 0; i < bins; ++i) {
    const double x0 = X(lo + i * bw), x1 = X(lo + (i + 1) * bw);
    o << "<rect x=\"" << f1(x0 + 1) << "\" y=\"" << f1(Y(count[size_t(i)])) << "\" width=\"" << f1(std::max(0.0, x1 - x0 - 2))
      << "\" height=\"" << f1(B - Y(count[size_t(i)])) << "\" fill=\"" << kCand << "\" fill-opacity=\"0.75\">"
      << title(us_str(lo + i * bw) + " - " + us_str(lo + (i + 1) * bw) + " us: " + std::to_string(count[size_t(i)]) + " calls")
      << "</rect>\n";
  }
  for (double v : nice_ticks(0, cmax, 4)) {
    o << line(L - 4, Y(v), L, Y(v), "#444") << text(L - 6, Y(v) + 4, tick_label(v), "end", 10, "#555");
  }
  for (double v : nice_ticks(lo, hi, 8)) {
    o << line(X(v), B, X(v), B + 5, "#444") << text(X(v), B + 18, tick_label(v), "middle", 10, "#555");
  }
  o << line(L, B, R, B, "#444") << line(L, T - 6, L, B, "#444");
  o << line(X(sm.median), T - 10, X(sm.median), B, "#0d2c54", 2);
  o << text(X(sm.median) + 4, T - 14, "median " + us_str(sm.median) + " us", X(sm.median) > (L + R) / 2.0 ? "end" : "start", 11,
            "#0d2c54", "font-weight=\"bold\"");
  o << text((L + R) / 2.0, B + 38, "GPU span per " + sample_noun(report.unit) + " (us); shaded: q1 " + us_str(sm.q1) + " to q3 " + us_str(sm.q3) + ", n " +
                                       std::to_string(sm.n),
            "middle", 11, "#555");
  o << text(14, (T + B) / 2.0, "calls", "middle", 11, "#555", "transform=\"rotate(-90 14 " + f1((T + B) / 2.0) + ")\"");
  o << "</svg>\n";
  return o.str();
}

std::string strip_chart(const ReportView& report, const ReportView& base) {
  const std::vector<double>&n = report.gpu_span_us.samples, &b = base.gpu_span_us.samples;
  if (n.empty() || b.empty()) return "";
  double lo = std::min(*std::min_element(n.begin(), n.end()), *std::min_element(b.begin(), b.end()));
  double hi = std::max(*std::max_element(n.begin(), n.end()), *std::max_element(b.begin(), b.end()));
  const double pad = std::max({(hi - lo) * 0.04, 1.0, std::fabs(hi) * 1e-6});
  lo -= pad;
  hi += pad;
  const int W = 1000, H = 170, L = 70, R = 970;
  auto X = [&](double v) { return L + (v - lo) / (hi - lo) * (R - L); };
  std::ostringstream o;
  o << svg_open(W, H, "GPU span samples of BASE and NEW on one axis");
  struct Row {
    const char* name;
    const std::vector<double>* v;
    const char* col;
    double y;
  };
  for (const Row& r : {Row{"BASE", &b, kBase, 40}, Row{"NEW", &n, kCand, 90}}) {
    o << text(L - 8, r.y + 4, r.name, "end", 12, r.col, "font-weight=\"bold\"");
    for (size_t i = 0; i < r.v->size(); ++i) {
      // Deterministic jitter (a hash of the index), so the page is the same every time.
      const double j = double((i * 2654435761u) % 1000) / 1000.0 - 0.5;
      o << circle(X((*r.v)[i]), r.y + 26 * j, 2.4, r.col, "fill-opacity=\"0.35\"");
    }
    const double m = median_of(*r.v);
    o << line(X(m), r.y - 18, X(m), r.y + 18, "#111", 2.5);
    const bool right = X(m) > (L + R) / 2.0;
    o << text(X(m) + (right ? -8 : 8), r.y - 8, "median " + us_str(m) + " us", right ? "end" : "start", 11, "#111");
  }
  for (double v : nice_ticks(lo, hi, 8))
    o << line(X(v), 125, X(v), 130, "#444") << text(X(v), 143, tick_label(v), "middle", 10, "#555");
  o << line(L, 125, R, 125, "#444");
  o << text((L + R) / 2.0, 162, "GPU span per " + sample_noun(report.unit) + " (us), every timed call", "middle", 11, "#555");
  o << "</svg>\n";
  return o.str();
}

// --- 4. The roofline bar. ---
std::string roofline_chart(const ReportView& report, const ReportView* base, const std::vector<LineupRow>& beside) {
  struct Bar {
    std::string name;
    double us;
    const char* col;
    bool bold;
  };
  std::vector<Bar> bars;
  const double fm = report.floor_measured_copy_bw_us, ft = report.floor_theoretical_bw_us;
  if (!std::isnan(ft)) bars.push_back({"floor at datasheet bandwidth", ft, kFloor, false});
  if (!std::isnan(fm)) bars.push_back({"floor at measured copy bandwidth", fm, kFloor, false});
  const double fr = report.floor_weight_read_us;
  if (!std::isnan(fr)) bars.push_back({"weight-read floor (read-only kernel)", fr, kFloor, false});
  // Every bar in the report's own clock (graded_time): BASE only when it was graded by the same one
  // (the --beside rows of another clock are apart already).
  const std::vector<double>& s = graded_time(report).samples;
  if (!s.empty()) bars.push_back({"this solution (" + report.solution_name + ")", median_of(s), kCand, true});
  if (base && base->clock == report.clock && !graded_time(*base).samples.empty())
    bars.push_back({"BASE (" + base->solution_name + ")", median_of(graded_time(*base).samples), kBase, false});
  for (const LineupRow& b : beside)
    if (b.apart.empty() && b.median_us > 0) bars.push_back({b.solution + " (graded beside it)", b.median_us, kAnchor, false});
  if (bars.empty()) return "";
  std::stable_sort(bars.begin(), bars.end(), [](const Bar& a, const Bar& b) { return a.us < b.us; });
  double mx = 0;
  for (auto& b : bars) mx = std::max(mx, b.us);
  const int W = 1000, L = 300, R = 730, rowh = 30, T = 10;
  const int H = T + rowh * int(bars.size()) + 40;
  auto X = [&](double us) { return L + us / (mx * 1.02) * (R - L); };
  std::ostringstream o;
  o << svg_open(W, H, "time per " + sample_noun(report.unit) + " against the bandwidth floor");
  for (double v : nice_ticks(0, mx * 1.02, 8)) {
    o << line(X(v), T, X(v), H - 30, "#eeeeee");
    o << text(X(v), H - 14, tick_label(v), "middle", 10, "#555");
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = T + rowh * double(i);
    o << text(L - 8, y + 19, b.name, "end", 12, b.bold ? "#0d2c54" : "#333", b.bold ? "font-weight=\"bold\"" : "");
    o << rect(L, y + 5, X(b.us) - L, rowh - 10, b.col, b.bold ? "" : "fill-opacity=\"0.75\"");
    std::string lab = us_str(b.us) + " us";
    // A report with its weight-read floor is measured against that (for a GEMM at small M the copy-
    // bandwidth floor is several times below what any kernel reaches after the flush).
    if (!std::isnan(fr) && b.col != kFloor)
      lab += "  (" + fixed(b.us / fr, 2) + "x the weight-read floor)";
    else if (!std::isnan(fm) && fm > 0 && b.col != kFloor)
      lab += "  (" + fixed(b.us / fm, 2) + "x the measured floor)";
    o << text(X(b.us) + 6, y + 19, lab, "start", 11, "#222", b.bold ? "font-weight=\"bold\"" : "");
  }
  o << line(L, T, L, H - 30, "#444");
  if (!std::isnan(fm)) o << line(X(fm), T, X(fm), H - 30, kFloor, 1, "stroke-dasharray=\"3 3\"");
  o << text((L + R) / 2.0, H - 1,
            "microseconds per " + sample_noun(report.unit) + " (" + graded_time_label(report) + "; shorter is better)", "middle",
            11, "#555");
  o << "</svg>\n";
  return o.str();
}

std::string row(const std::string& k, const std::string& v_html) {
  return "<tr><th>" + html_escape(k) + "</th><td>" + v_html + "</td></tr>\n";
}

std::string comparison_section(const Comparison& c) {
  std::ostringstream o;
  o << "<h2>Comparison with BASE</h2>\n";
  if (c.forced)
    o << "<p class=\"warn\">FORCED: these reports are not comparable; compared anyway.</p>\n";
  if (!c.refused.empty() || !c.not_comparable.empty() || !c.missing_timing.empty()) {
    o << "<ul class=\"warn\">\n";
    for (const auto& s : c.refused) o << "<li>not comparable, even by nibble compare --force: " << html_escape(s) << "</li>\n";
    for (const auto& s : c.not_comparable) o << "<li>not comparable: " << html_escape(s) << "</li>\n";
    for (const auto& s : c.missing_timing) o << "<li>" << html_escape(s) << "</li>\n";
    o << "</ul>\n";
  }
  for (const auto& s : c.correctness_regressions)
    o << "<p class=\"bad\">Correctness regression: " << html_escape(s) << "</p>\n";
  o << "<table class=\"grid\">\n<tr><th></th><th>BASE</th><th>NEW (this report)</th></tr>\n";
  auto idrow = [&](const std::string& k, const std::string& f) {
    auto v = [&](const json& id) {
      const json& x = id[f];
      return html_escape(x.is_string() ? x.get<std::string>() : x.is_null() ? std::string("n/a") : x.is_number() ? err_str(x.get<double>()) : x.dump());
    };
    o << "<tr><th>" << html_escape(k) << "</th><td>" << v(c.base_id) << "</td><td>" << v(c.new_id) << "</td></tr>\n";
  };
  idrow("file", "file");
  idrow("solution", "solution");
  idrow("disposition", "disposition");
  idrow("worst relative error", "worst_rel_err");
  idrow("created (UTC)", "created_utc");
  o << "</table>\n";
  if (!c.figures.empty()) {
    const std::string level = fmt_g(100 * (1 - c.options.alpha));
    o << "<table class=\"grid\" id=\"compare-table\">\n<tr><th>figure</th><th>BASE median</th><th>NEW median</th><th>NEW/BASE</th><th>"
      << level << "% interval</th><th>p (Mann-Whitney U)</th><th>verdict</th></tr>\n";
    for (const auto& f : c.figures) {
      const std::string cls = f.verdict == "SLOWER" ? "bad" : f.verdict == "FASTER" ? "good" : f.verdict == "UNSURE" ? "warn" : "";
      o << "<tr><td>" << html_escape(f.figure) << "</td><td>" << us_str(f.median_base) << " us</td><td>" << us_str(f.median_new)
        << " us</td><td>" << fixed(f.ci.ratio, 4) << "x</td><td>[" << fixed(f.ci.lo, 4) << ", " << fixed(f.ci.hi, 4) << "]</td><td>"
        << html_escape(fmt_g(f.mwu.p, 2)) << "</td><td class=\"verdict " << cls << "\" data-figure=\"" << html_escape(f.figure)
        << "\">" << html_escape(f.verdict) << "</td></tr>\n";
    }
    o << "</table>\n<ul class=\"why\">\n";
    for (const auto& f : c.figures) {
      o << "<li><b>" << html_escape(f.figure) << "</b>: " << html_escape(f.why);
      if (f.verdict == "UNSURE") {
        if (f.samples_needed_new)
          o << "; about " << *f.samples_needed_base << " (BASE) and " << *f.samples_needed_new
            << " (NEW) samples per report would tell";
        else
          o << "; no realistic number of samples would tell";
      }
      o << "</li>\n";
    }
    o << "</ul>\n";
  }
  o << "<p>nibble compare would exit <b id=\"compare-exit\">" << c.exit_code << "</b>: " << html_escape(c.result) << "</p>\n";
  o << "<p class=\"note\">Threshold: a slowdown must exceed " << html_escape(fmt_g(c.options.max_slowdown_pct))
    << "% and be significant at alpha " << html_escape(fmt_g(c.options.alpha))
    << ". Interval: percentile bootstrap of the ratio of medians (" << c.options.resamples
    << " resamples). p: two-sided Mann-Whitney U, normal approximation with tie and continuity corrections.</p>\n";
  return o.str();
}

const char* kCss = R"CSS(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; margin: 0; background: #fafafa; }
main { max-width: 1040px; margin: 0 auto; padding: 16px 20px 40px; background: #fff; }
main.wide { max-width: 1500px; }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #555; font-size: 13px; margin: 0 0 12px; }
.verdict-box { border-radius: 6px; padding: 12px 16px; margin: 12px 0; font-size: 16px; }
.verdict-box.pass { background: #e8f5e9; border: 2px solid #2e7d32; }
.verdict-box.fail { background: #ffebee; border: 2px solid #c62828; }
.verdict-box .disp { font-size: 22px; font-weight: bold; margin-right: 10px; }
.pass .disp { color: #2e7d32; } .fail .disp { color: #c62828; }
.figures { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.fig { flex: 1 1 0; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 110px; }
.fig .k { color: #666; font-size: 12px; } .fig .v { font-size: 20px; font-weight: bold; }
table { border-collapse: collapse; font-size: 13px; }
table.grid td, table.grid th { border: 1px solid #ddd; padding: 4px 8px; text-align: left; }
table.kv th { text-align: left; padding: 2px 12px 2px 0; color: #555; font-weight: normal; vertical-align: top; }
table.kv td { padding: 2px 0; word-break: break-all; }
table.lineup { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
table.lineup th, table.lineup td { padding: 3px 8px; border-bottom: 1px solid #e3e3e3; text-align: right; }
table.lineup td:nth-child(2), table.lineup td:nth-child(3), table.lineup td:last-child { text-align: left; }
table.lineup tr.fail td { color: #a02020; }
table.lineup td.t, table.lineup th.t { text-align: left; }
table.lineup tr.apart td { color: #777; }
table.board td { white-space: nowrap; } table.board td.t { white-space: normal; }
table.board td.path { font-size: 11px; word-break: break-all; min-width: 180px; }
div.scroll { overflow-x: auto; }
.good { color: #2e7d32; font-weight: bold; } .bad { color: #c62828; font-weight: bold; } .warn { color: #b26a00; font-weight: bold; }
.note { color: #666; font-size: 12px; }
ul.why { font-size: 13px; } table.grid { margin: 8px 0; }
svg { display: block; max-width: 100%; height: auto; font-family: system-ui, Helvetica, Arial, sans-serif; }
code { font-size: 12px; }
)CSS";

}  // namespace

std::string html_page_begin(const std::string& title, bool wide) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" + html_escape(title) + "</title>\n<style>" +
         kCss + "</style>\n</head>\n<body>\n" + (wide ? "<main class=\"wide\">\n" : "<main>\n");
}

std::string html_page_end() { return "</main>\n</body>\n</html>\n"; }

std::string error_anchor_source(const ReportView& report, const std::vector<ErrorAnchor>& task_anchors) {
  const CalibrationView& c = report.calibration;
  if (error_anchors(report, task_anchors).empty())
    return "none: no calibration table given (report html --calibration, nibble calibrate --task ... --out)";
  if (!c.present || (c.rows.empty() && std::isnan(c.legitimate_variants_worst) && !std::isfinite(c.dropped_feature_variants_best)))
    return "the drop-the-feature table of the task's seed (for context)";
  std::string s = "measured by nibble calibrate";
  if (!c.device.empty()) s += " on " + c.device;
  if (!c.created_utc.empty()) s += ", " + c.created_utc;
  if (!c.source.empty()) s += " (" + c.source + ")";
  return s;
}

std::string render_html_report(const ReportView& report, const std::string& report_label, const HtmlAnchors& anchors,
                               const ReportView* base_report, const std::string& base_label, const Comparison* cmp) {
  // BASE's times are drawn only where they were taken as this report's (the same clock and graph
  // record mode): otherwise the comparison section alone says why not.
  const ReportView* base = cmp && cmp->refused_timing_only ? nullptr : base_report;
  const std::string& disp = report.disposition;
  const bool passed = disp == "Passed";
  const std::vector<double>& span = report.gpu_span_us.samples;
  const std::string gpu = report.device_name.empty() ? "no GPU recorded" : report.device_name;
  // The report and the ones beside it, as one lineup; the roofline draws the others' rows.
  std::vector<ReportView> all{report};
  std::vector<std::string> labels{report_label};
  all.insert(all.end(), anchors.beside.begin(), anchors.beside.end());
  labels.insert(labels.end(), anchors.beside_labels.begin(), anchors.beside_labels.end());
  const std::vector<LineupRow> lineup = make_lineup(all, labels);
  const std::vector<LineupRow> beside_rows(lineup.begin() + 1, lineup.end());
  std::ostringstream o;
  o << html_page_begin("nibble report: " + report.solution_name + ", " + report.task + " / " + report.config);
  o << "<h1>nibble report: " << html_escape(report.solution_name) << "</h1>\n";
  o << "<p class=\"sub\">" << html_escape(report.task) << " / " << html_escape(report.config) << " on " << html_escape(gpu)
    << ", graded " << html_escape(report.created_utc.empty() ? "?" : report.created_utc) << " by nibble "
    << html_escape(report.nibble_version.empty() ? "?" : report.nibble_version) << " &middot; " << html_escape(report_label)
    << "</p>\n";

  // The verdict.
  o << "<div class=\"verdict-box " << (passed ? "pass" : "fail") << "\"><span class=\"disp\" id=\"disposition\">" << html_escape(disp)
    << "</span> <span id=\"reason\">" << html_escape(report.reason) << "</span></div>\n";

  // Key figures: those the report has (a report with its FLOPs shows its rates).
  const double w = report.worst_rel_err, gate = report.gate;
  const double fm = report.floor_measured_copy_bw_us, ft = report.floor_theoretical_bw_us, fr = report.floor_weight_read_us;
  auto fig = [&](const std::string& k, const std::string& id, const std::string& v, const std::string& unit) {
    o << "<div class=\"fig\"><div class=\"k\">" << html_escape(k) << "</div><div class=\"v\"><span id=\"" << id << "\">" << html_escape(v)
      << "</span>" << (unit.empty() ? "" : " " + html_escape(unit)) << "</div></div>\n";
  };
  const std::string noun = sample_noun(report.unit);
  o << "<div class=\"figures\">\n";
  if (report.clock == "wall") {  // graded by the grader's clock: that is the figure; the GPU span beside it
    const std::vector<double>& graded = graded_time(report).samples;
    fig(graded_time_label(report) + " per " + noun, "median-us", graded.empty() ? "n/a" : us_str(median_of(graded)),
        graded.empty() ? "" : "us");
    fig("median GPU span per " + noun, "median-span-us", span.empty() ? "n/a" : us_str(median_of(span)), span.empty() ? "" : "us");
  } else {
    fig("median GPU span per " + noun, "median-us", span.empty() ? "n/a" : us_str(median_of(span)), span.empty() ? "" : "us");
  }
  if (report.graph_records == "graphs")  // the span's CUDA graphs as one record per launch
    fig("CUDA graphs recorded", "graph-records", "whole (--graph-records graphs)", "");
  fig("floor at measured copy bandwidth", "floor-measured-us", us_str(fm), std::isnan(fm) ? "" : "us");
  fig("floor at datasheet bandwidth", "floor-theoretical-us", us_str(ft), std::isnan(ft) ? "" : "us");
  if (!std::isnan(report.tflops)) {  // the fraction below is the floor over the median
    const double tf = report.tflops, bw = report.achieved_bandwidth_Bps;
    fig("arithmetic rate", "tflops", fixed(tf, tf >= 100 ? 0 : 1), "TFLOP/s");
    fig("bytes moved per second", "tbps", std::isnan(bw) ? "n/a" : fixed(bw / 1e12, 2), std::isnan(bw) ? "" : "TB/s");
  }
  if (!std::isnan(fr)) fig("weight-read floor (read-only kernel, same flush)", "floor-weight-read-us", us_str(fr), "us");
  const double frac = report.fraction_of_measured_bw;
  fig("of measured copy bandwidth", "fraction-measured-bw", std::isnan(frac) ? "n/a" : fixed(100 * frac, 1), std::isnan(frac) ? "" : "%");
  fig("worst relative error", "worst-rel-err", report.worst_rel_err_recorded ? err_str(w) : "not run", "");
  fig("gate", "gate", err_str(gate), "");
  o << "</div>\n";

  std::string outputs;
  for (const auto& [name, e] : report.worst_by_output) outputs += (outputs.empty() ? " of " : ", ") + name;
  const std::vector<ErrorAnchor> error_points = error_anchors(report, anchors.errors);
  o << "<h2>Error against the gate</h2>\n"
    << "<p class=\"note\">Worst relative error" << html_escape(outputs) << " over the checked " << html_escape(noun)
    << "s and seeds (the report's metric: " << html_escape(report.metric.empty() ? "not recorded" : report.metric) << "). "
    << "Diamonds: the drop-the-feature variants, " << html_escape(error_anchor_source(report, anchors.errors))
    << "; green must pass, red must fail.</p>\n";
  o << error_chart(report, error_points);

  // Speed: against the floor and the anchors first, then the comparison, then the detail.
  if (!span.empty()) {
    const double bytes = report.bytes_per_call;
    o << "<h2>Against the roofline</h2>\n<p class=\"note\">Bytes a " << html_escape(noun) << " must move: "
      << html_escape(bytes >= 1e9 ? fmt_g(bytes / 1e9, 4) + " GB" : fmt_g(bytes / 1e6, 4) + " MB")
      << ". Floors: those bytes at the copy bandwidth measured in this run and at "
      << "the datasheet bandwidth"
      << (std::isnan(fr) ? "."
                         : "; and the weight-read floor, the span of a kernel that only reads W's codes and scales after the same L2 "
                           "flush (measured in the same grade), which the bars' ratios refer to.")
      << (beside_rows.empty() ? "" : " Purple: the reports graded beside it (same task, config and GPU), from their own reports.")
      << "</p>\n";
    o << roofline_chart(report, base, beside_rows);
  } else {
    o << "<h2>Timing</h2>\n<p class=\"note\">This report has no timing (not timed, or the grade stopped before it).</p>\n";
  }
  if (!anchors.beside.empty()) {
    o << "<h2>Side by side</h2>\n<p class=\"note\">This report first, then the reports given beside it; ranked by median among "
      << "the Passed reports of the same task, config, GPU, report schema, clock and graph-record mode (a report that launched no CUDA graph goes with either); speedup is this report's median over each row's.</p>\n"
      << lineup_html(lineup);
  }
  if (base_report && cmp) o << comparison_section(*cmp);
  if (!span.empty() && !report.positions.empty()) {
    auto count = [](double v) { return std::isnan(v) ? std::string("?") : fmt_g(v, 10); };
    o << "<h2>Time per " << html_escape(noun) << " across the positions</h2>\n<p class=\"note\">" << count(report.calls_per_round) << " "
      << html_escape(noun) << "s per round, " << count(report.rounds) << " rounds; every call at its position.</p>\n";
    o << positions_chart(report, base);
  }
  if (!span.empty()) {
    o << "<h2>Distribution of the samples</h2>\n";
    o << histogram_chart(report);
    if (base) o << strip_chart(report, *base);
  }

  // Provenance.
  o << "<h2>How this report was made</h2>\n<table class=\"kv\">\n";
  o << row("solution", html_escape(report.solution_name) + " <code>" + html_escape(report.solution_path) + "</code>");
  if (!report.solution_facts.empty()) {
    std::string f;
    for (const auto& x : report.solution_facts) f += (f.empty() ? "" : ", ") + html_escape(x);
    o << row("solution facts", f);
  }
  o << row("solution SHA-256", "<code>" + html_escape(report.solution_sha256.empty() ? "?" : report.solution_sha256) + "</code>");
  o << row("reference", html_escape(report.reference_name) + " &middot; " + html_escape(report.reference_numerics));
  for (const FixtureView& f : report.fixtures)
    o << row("fixture seed " + f.seed, "<code>" + html_escape(f.file_sha256.empty() ? "?" : f.file_sha256) + "</code>");
  if (!report.device_name.empty() || report.device_sms != "?")
    o << row("GPU", html_escape(report.device_name.empty() ? "?" : report.device_name) + ", compute capability " +
                        html_escape(report.device_compute_capability) + ", " + html_escape(report.device_sms) + " SMs, driver " +
                        html_escape(report.device_driver));
  if (!report.timing_protocol.empty()) o << row("timing", html_escape(report.timing_protocol));
  if (!report.stop_reason.empty()) o << row("timing stopped", html_escape(report.stop_reason));
  if (!std::isnan(report.gaps_with_foreign_work)) {
    // The grader's check of the work between timed calls (GPU work outside every window).
    const auto n = [](double v) { return std::isnan(v) ? std::string("?") : fmt_g(v, 10); };
    o << row("between calls", html_escape(n(report.gaps_with_foreign_work) + " gaps held GPU work" +
                                          (report.foreign_work.empty() ? "" : " (" + report.foreign_work + ")") +
                                          " beyond the harness's own (" + n(report.harness_records_per_gap) +
                                          " records per gap); " + n(report.late_kernels) +
                                          " kernels reached the timer after their window or gap was collected"));
  }
  if (!report.rule.empty()) o << row("verdict rule", html_escape(report.rule));
  {
    std::string commit = report.git_commit.value_or("unknown");
    if (report.git_dirty) commit += " (dirty)";
    if (!report.git_commit_from.empty()) commit += ", from " + report.git_commit_from;
    o << row("git", html_escape(commit));
  }
  if (!report.host_json.empty()) o << row("host", html_escape(report.host_json));
  if (!report.argv.empty()) {
    std::string a;
    for (const std::string& x : report.argv) a += (a.empty() ? "" : " ") + x;
    o << row("command", "<code>" + html_escape(a) + "</code>");
  }
  if (base_report) o << row("BASE report", html_escape(base_label));
  o << "</table>\n<p class=\"note\">Written by <code>nibble report html</code>; self-contained: no script, no network.</p>\n";
  o << html_page_end();
  return o.str();
}

}  // namespace nibble
