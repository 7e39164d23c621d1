// lineup.h: several graded reports side by side, one row each: `nibble grade --solution A
// --solution B` (its lineup.{txt,json,html}), `nibble report html R.json --beside X.json` (the
// page's table and roofline bars), and any tool that ranks reports.
//
// Reports are ranked only within a group of comparable ones: the same task, config, GPU model and
// report schema major (a median on another GPU, or under another schema's timing rules, is not the
// same measurement). Rows of another group are listed apart with the reason. Within a group, the
// Passed reports are ranked by median GPU span; a report that did not pass is listed, never ranked.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/report_view.h"

namespace nibble {

/** One report's line. Times in microseconds per sample (the report's unit); NaN where the report
 *  has no such figure. */
struct LineupRow {
  std::string label;  // how the caller names the report (a file, a solution path)
  std::string solution, disposition, reason;
  std::string task, config, gpu, schema_version, commit, unit;
  double median_us = NAN, q1_us = NAN, q3_us = NAN;
  double floor_us = NAN;           // the report's floor at the measured copy bandwidth
  double fraction_of_floor = NAN;  // floor_us / median_us (1 = at the floor)
  double worst_rel_err = NAN, gate = NAN;
  int rank = 0;                    // 1 = fastest Passed report of the first group; 0: not ranked
  double speedup_vs_first = NAN;   // the first row's median / this median, same group and both timed
  std::string group;               // "task / config / GPU / schema N"
  std::string apart;               // "" in the first row's group; else why it is not ranked with it
};

/** The rows of `reports` in the given order (labels[i] names reports[i]; same length). The first
 *  report's group is the one ranked; the speedup column is relative to the first report. */
std::vector<LineupRow> make_lineup(const std::vector<ReportView>& reports, const std::vector<std::string>& labels);

/** A fixed-width text table (what `nibble grade` prints after several solutions). */
std::string format_lineup(const std::vector<LineupRow>& rows);

/** {"schema": "nibble.lineup", "rows": [...]}: every field of every row (NaN as null). */
nlohmann::ordered_json lineup_json(const std::vector<LineupRow>& rows);

/** An HTML <table> of the rows (every string escaped), for the report page. */
std::string lineup_html(const std::vector<LineupRow>& rows);

}  // namespace nibble
