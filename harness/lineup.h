// lineup.h: several graded reports side by side, one row each: `nibble grade --solution A
// --solution B` (its lineup.{txt,json,html}), `nibble report html R.json --beside X.json` (the
// page's table and roofline bars), `nibble leaderboard RESULTS...` (one group per task and config),
// and any tool that ranks reports.
//
// Reports are ranked only within a group of comparable ones: the same task, config, GPU model and
// report schema major (a median on another GPU, or under another schema's timing rules, is not the
// same measurement). Rows of another group are listed apart with the reason. Within a group, the
// Passed reports are ranked by median GPU span; a report that did not pass is listed, never ranked.
#pragma once

#include <functional>
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

// ---------------------------------------------------------------------------------------------
// A leaderboard: many reports (`nibble leaderboard RESULTS...`), one group per task and config,
// each ranked by the rule above and measured against the task's bundled baselines.

/** A bundled baseline among a group's ranked reports (the fastest of its reports when several). */
struct LeaderboardBaseline {
  std::string solution, label;
  double median_us = NAN;
};

/** A leaderboard's row: the lineup row (its rank within the group's ranked set; apart: "" in the
 *  ranked set, else why not in it) and its speedup over each of the group's baselines. */
struct LeaderboardRow {
  LineupRow row;
  std::vector<double> speedup;  // per LeaderboardGroup::baselines: the baseline's median / this row's; NaN unless ranked
};

/** One task and config. */
struct LeaderboardGroup {
  std::string task, config, unit;
  bool known_task = true;  // a task of this nibble (task_or_null): else its reports' checks against the task were not made
  std::string gpu;       // the ranked set's GPU model ("" when its reports record none)
  int schema_major = 0;  // ... and report schema major
  std::string clock = "span";  // ... and what its time is: "span" (GPU span) or "wall" (the grader's clock)
  std::string graph_records = "nodes";  // ... and how its CUDA graphs were recorded (--graph-records): "graphs" whole, "nodes" by nodes or none launched
  std::string ranked;    // the ranked set as a lineup group: "task / config / GPU / schema N"
  std::vector<std::string> baseline_solutions;  // the task's bundled baselines, present or not
  std::vector<LeaderboardBaseline> baselines;   // those Passed and timed in the ranked set, in the task's order
  std::vector<LeaderboardRow> rows;  // the ranked by rank, the ranked set's others, those apart (each in the given order)
};

/** A file in a folder given to the leaderboard that looks like a report and does not read: listed on
 *  the board with the reason, never ranked, and never dropped unseen. */
struct UnreadReport {
  std::string path, reason;
};

/** A task's bundled baselines by name: task_baseline_solutions (task_anchors.h), or a test's list. */
using BaselinesOf = std::function<std::vector<std::string>(const std::string& task)>;

/** The leaderboard's rule in words (the JSON's "rule", the pages' note). */
extern const char* const kLeaderboardRule;

/**
 * Splits `reports` (labels[i] names reports[i]) into one group per task and config, ordered by
 * task, then config. A group's ranked set is the GPU model and schema major with the most Passed,
 * timed reports (ties: the newer schema, then more reports, then the first met); its reports are
 * ranked as make_lineup ranks the first row's group, and the group's reports of another GPU or
 * schema are listed apart with the reason. Speedups are over the bundled baselines
 * (`baselines_of(task)`) that are ranked in the set, for the ranked rows only: a time of a grade
 * that did not pass is no result to compare.
 */
std::vector<LeaderboardGroup> make_leaderboard(const std::vector<ReportView>& reports, const std::vector<std::string>& labels,
                                               const BaselinesOf& baselines_of);

/** Fixed-width text: per group a heading, what is ranked and against which baselines, the table;
 *  then the files that did not read (`unread`), each with its reason. */
std::string format_leaderboard(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread = {});

/** The same as a GitHub Markdown document: per group a heading, a line, a table (cells escaped). */
std::string leaderboard_markdown(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread = {});

/** The same as one self-contained HTML page (the report page's style; no script, no network). */
std::string leaderboard_html(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread = {});

/** {"schema": "nibble.leaderboard", "groups": [...], "unread": [...]}: every field of every group
 *  and row (NaN as null), and every file that did not read with its reason; `inputs` are the
 *  RESULTS as given (docs/report-schema.md). */
nlohmann::ordered_json leaderboard_json(const std::vector<LeaderboardGroup>& groups, const std::vector<std::string>& inputs,
                                        const std::vector<UnreadReport>& unread = {});

}  // namespace nibble
