// lineup.cpp: see lineup.h.
#include "harness/lineup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "harness/html_report.h"

namespace nibble {

namespace {

std::string group_of(const ReportView& r) {
  return r.task + " / " + r.config + " / " + (r.device_name.empty() ? "no GPU recorded" : r.device_name) + " / schema " +
         std::to_string(r.schema_major);
}

/** Why `r` is not ranked with `first`: the first difference, in words. */
std::string apart_from(const ReportView& r, const ReportView& first) {
  if (r.task != first.task) return "another task (" + r.task + ")";
  if (r.config != first.config) return "another config (" + r.config + ")";
  if (r.device_name != first.device_name) return "another GPU (" + (r.device_name.empty() ? "none recorded" : r.device_name) + ")";
  if (r.schema_major != first.schema_major) return "another report schema (" + r.schema_version + ")";
  return "";
}

std::string num(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

nlohmann::ordered_json or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

}  // namespace

std::vector<LineupRow> make_lineup(const std::vector<ReportView>& reports, const std::vector<std::string>& labels) {
  std::vector<LineupRow> rows;
  for (size_t i = 0; i < reports.size(); ++i) {
    const ReportView& r = reports[i];
    LineupRow x;
    x.label = i < labels.size() ? labels[i] : r.solution_path;
    x.solution = r.solution_name;
    x.disposition = r.disposition;
    x.reason = r.reason;
    x.task = r.task;
    x.config = r.config;
    x.gpu = r.device_name;
    x.schema_version = r.schema_version;
    x.commit = r.git_commit.value_or("");
    x.unit = r.unit;
    if (r.gpu_span_us.present) {
      x.median_us = r.gpu_span_us.median;
      x.q1_us = r.gpu_span_us.q1;
      x.q3_us = r.gpu_span_us.q3;
    }
    x.floor_us = r.floor_measured_copy_bw_us;
    if (x.median_us > 0) x.fraction_of_floor = x.floor_us / x.median_us;
    x.worst_rel_err = r.worst_rel_err;
    x.gate = r.gate;
    x.group = group_of(r);
    x.apart = apart_from(r, reports.front());
    rows.push_back(std::move(x));
  }
  // Rank the Passed, timed rows of the first group by median.
  std::vector<size_t> ranked;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].apart.empty() && rows[i].disposition == "Passed" && rows[i].median_us > 0) ranked.push_back(i);
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return rows[a].median_us < rows[b].median_us; });
  for (size_t k = 0; k < ranked.size(); ++k) rows[ranked[k]].rank = int(k) + 1;
  if (!rows.empty() && rows.front().median_us > 0)
    for (LineupRow& x : rows)
      if (x.apart.empty() && x.median_us > 0) x.speedup_vs_first = rows.front().median_us / x.median_us;
  return rows;
}

std::string format_lineup(const std::vector<LineupRow>& rows) {
  if (rows.empty()) return "";
  std::ostringstream o;
  const std::string unit = rows.front().unit.empty() ? "call" : rows.front().unit;
  o << "side by side: " << rows.front().group << " (speedup: the first row's median over each row's)\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-4s %-34s %-14s %12s %21s %8s %8s %10s\n", "rank", "solution", "disposition",
                ("us/" + unit).c_str(), "q1 - q3", "of floor", "speedup", "worst err");
  o << line;
  for (const LineupRow& x : rows) {
    const std::string q = std::isnan(x.q1_us) ? "-" : num(x.q1_us, "%.4g") + " - " + num(x.q3_us, "%.4g");
    std::snprintf(line, sizeof line, "  %-4s %-34s %-14s %12s %21s %8s %8s %10s\n", x.rank ? std::to_string(x.rank).c_str() : "-",
                  x.solution.substr(0, 34).c_str(), x.disposition.c_str(), num(x.median_us, "%.5g").c_str(), q.c_str(),
                  std::isnan(x.fraction_of_floor) ? "-" : (num(100 * x.fraction_of_floor, "%.1f") + "%").c_str(),
                  std::isnan(x.speedup_vs_first) ? "-" : (num(x.speedup_vs_first, "%.2f") + "x").c_str(),
                  num(x.worst_rel_err, "%.3g").c_str());
    o << line;
  }
  for (const LineupRow& x : rows)
    if (!x.apart.empty()) o << "  not ranked with the first: " << x.solution << " (" << x.label << "): " << x.apart << "\n";
  for (const LineupRow& x : rows)
    if (x.apart.empty() && x.disposition != "Passed") o << "  " << x.solution << ": " << x.disposition << ": " << x.reason << "\n";
  return o.str();
}

nlohmann::ordered_json lineup_json(const std::vector<LineupRow>& rows) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const LineupRow& x : rows)
    a.push_back({{"label", x.label},
                 {"solution", x.solution},
                 {"disposition", x.disposition},
                 {"reason", x.reason},
                 {"task", x.task},
                 {"config", x.config},
                 {"gpu", x.gpu},
                 {"schema_version", x.schema_version},
                 {"commit", x.commit},
                 {"unit", x.unit},
                 {"median_us", or_null(x.median_us)},
                 {"q1_us", or_null(x.q1_us)},
                 {"q3_us", or_null(x.q3_us)},
                 {"floor_us", or_null(x.floor_us)},
                 {"fraction_of_floor", or_null(x.fraction_of_floor)},
                 {"worst_rel_err", or_null(x.worst_rel_err)},
                 {"gate", or_null(x.gate)},
                 {"rank", x.rank ? nlohmann::ordered_json(x.rank) : nlohmann::ordered_json()},
                 {"speedup_vs_first", or_null(x.speedup_vs_first)},
                 {"group", x.group},
                 {"apart", x.apart}});
  return {{"schema", "nibble.lineup"},
          {"schema_version", "1.0.0"},
          {"rule", "ranked by median GPU span among the Passed reports of the first row's group (task, config, GPU, "
                   "schema major); speedup = the first row's median / the row's"},
          {"rows", a}};
}

std::string lineup_html(const std::vector<LineupRow>& rows) {
  if (rows.empty()) return "";
  std::ostringstream o;
  const std::string unit = rows.front().unit.empty() ? "call" : rows.front().unit;
  o << "<table class=\"lineup\" id=\"lineup\">\n<tr><th>rank</th><th>solution</th><th>disposition</th><th>us/" << html_escape(unit)
    << " (median)</th><th>q1 - q3</th><th>of floor</th><th>speedup</th><th>worst error</th><th>GPU</th><th>commit</th><th>note</th></tr>\n";
  for (const LineupRow& x : rows) {
    const std::string q = std::isnan(x.q1_us) ? "-" : num(x.q1_us, "%.4g") + " - " + num(x.q3_us, "%.4g");
    const std::string note = !x.apart.empty() ? "not ranked: " + x.apart : x.disposition != "Passed" ? x.reason : "";
    o << "<tr class=\"" << (x.disposition == "Passed" ? "pass" : "fail") << "\"><td>" << (x.rank ? std::to_string(x.rank) : "-")
      << "</td><td>" << html_escape(x.solution) << "</td><td>" << html_escape(x.disposition) << "</td><td>"
      << num(x.median_us, "%.5g") << "</td><td>" << q << "</td><td>"
      << (std::isnan(x.fraction_of_floor) ? "-" : num(100 * x.fraction_of_floor, "%.1f") + "%") << "</td><td>"
      << (std::isnan(x.speedup_vs_first) ? "-" : num(x.speedup_vs_first, "%.2f") + "x") << "</td><td>"
      << num(x.worst_rel_err, "%.3g") << "</td><td>" << html_escape(x.gpu) << "</td><td><code>" << html_escape(x.commit.substr(0, 12))
      << "</code></td><td>" << html_escape(note) << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

}  // namespace nibble
