// lineup.cpp: see lineup.h.
#include "harness/lineup.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "harness/html_report.h"
#include "harness/stats.h"
#include "harness/task.h"

namespace nibble {

namespace {

/** Whether r belongs with the reports whose CUDA graphs were recorded whole: its figure depends on
 *  the mode and the mode is "graphs". A report that launched no graph (figure_graph_records "") goes
 *  with the per-node set, and is set apart from neither. */
bool graphs_whole(const ReportView& r) { return figure_graph_records(r) == "graphs"; }

/** The ranked set r names: its task, config, GPU, schema, clock and, `whole`, graphs recorded whole. */
std::string group_of(const ReportView& r, bool whole) {
  return r.task + " / " + r.config + " / " + (r.device_name.empty() ? "no GPU recorded" : r.device_name) + " / schema " +
         std::to_string(r.schema_major) + (r.clock == "wall" ? " / the grader's clock" : "") +
         (whole ? " / graphs recorded whole" : "");
}
std::string group_of(const ReportView& r) { return group_of(r, graphs_whole(r)); }

std::string num(double v, const char* fmt);

/** Why `r` is not ranked with `first`, whose set records CUDA graphs whole when `set_whole`: a figure
 *  that is not its samples', or the first difference, in words. */
std::string apart_from(const ReportView& r, const ReportView& first, bool set_whole) {
  if (const std::string p = figure_problem(r); !p.empty()) return p;
  if (r.task != first.task) return "another task (" + r.task + ")";
  if (r.config != first.config) return "another config (" + r.config + ")";
  if (r.device_name != first.device_name) return "another GPU (" + (r.device_name.empty() ? "none recorded" : r.device_name) + ")";
  if (r.schema_major != first.schema_major) return "another report schema (" + r.schema_version + ")";
  if (r.clock != first.clock)
    return r.clock == "wall" ? "timed on the grader's clock (--clock wall), not by GPU span"
                             : "timed by GPU span, not on the grader's clock (--clock wall)";
  if (!figure_graph_records(r).empty() && graphs_whole(r) != set_whole)
    return "its CUDA graphs recorded by " + r.graph_records + ", the first row's by " +
           (set_whole ? "graphs" : figure_graph_records(first).empty() ? "nodes or none launched" : "nodes") +
           " (--graph-records)";
  return "";
}

/** A row's median, with its own unit when it is not the table's (a report of another task). */
std::string median_text(const LineupRow& x, const std::string& table_unit);

std::string num(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

std::string median_text(const LineupRow& x, const std::string& table_unit) {
  const std::string u = x.unit.empty() ? table_unit : x.unit;
  return num(x.median_us, "%.5g") + (u == table_unit || std::isnan(x.median_us) ? "" : " us/" + u);
}

nlohmann::ordered_json or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

/** `r`'s row, all but what depends on the other rows (rank, apart, speedups). */
LineupRow row_of(const ReportView& r, const std::string& label) {
  LineupRow x;
  x.label = label;
  x.solution = r.solution_name;
  x.disposition = r.disposition;
  x.reason = r.reason;
  x.task = r.task;
  x.config = r.config;
  x.gpu = r.device_name;
  x.schema_version = r.schema_version;
  x.commit = r.git_commit.value_or("");
  x.unit = r.unit;
  if (const FigureView& t = graded_time(r); t.present) {
    x.median_us = t.median;
    x.q1_us = t.q1;
    x.q3_us = t.q3;
  }
  x.floor_us = r.floor_measured_copy_bw_us;
  if (x.median_us > 0) x.fraction_of_floor = x.floor_us / x.median_us;
  x.worst_rel_err = r.worst_rel_err;
  x.gate = r.gate;
  x.group = group_of(r);
  return x;
}

/** How row i is named: the caller's label, else the solution's path. */
std::string label_of(const std::vector<ReportView>& reports, const std::vector<std::string>& labels, size_t i) {
  return i < labels.size() ? labels[i] : reports[i].solution_path;
}

/** A row that may be ranked where it is comparable: a Passed grade with a GPU span. */
bool rankable(const LineupRow& x) { return x.disposition == "Passed" && x.median_us > 0; }

/** The one ranking: the rankable rows not apart, by median (ties keep the given order). */
void rank_comparable(std::vector<LineupRow>& rows) {
  std::vector<size_t> ranked;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].apart.empty() && rankable(rows[i])) ranked.push_back(i);
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return rows[a].median_us < rows[b].median_us; });
  for (size_t k = 0; k < ranked.size(); ++k) rows[ranked[k]].rank = int(k) + 1;
}

nlohmann::ordered_json row_json(const LineupRow& x) {
  return {{"label", x.label},
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
          {"apart", x.apart}};
}

}  // namespace

std::vector<LineupRow> make_lineup(const std::vector<ReportView>& reports, const std::vector<std::string>& labels) {
  std::vector<LineupRow> rows;
  // The first row's set: its own record mode, whether or not it launched a graph (a report that
  // launched none goes with either, so it takes the mode it was graded in).
  const bool set_whole = !reports.empty() && reports.front().graph_records == "graphs";
  for (size_t i = 0; i < reports.size(); ++i) {
    rows.push_back(row_of(reports[i], label_of(reports, labels, i)));
    rows.back().apart = apart_from(reports[i], reports.front(), set_whole);
  }
  if (!rows.empty()) rows.front().group = group_of(reports.front(), set_whole);
  rank_comparable(rows);
  // Speedups are over the first row's median: none when that row is itself apart (an edited report).
  if (!rows.empty() && rows.front().apart.empty() && rows.front().median_us > 0)
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
                  x.solution.substr(0, 34).c_str(), x.disposition.c_str(), median_text(x, unit).c_str(), q.c_str(),
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
  for (const LineupRow& x : rows) a.push_back(row_json(x));
  return {{"schema", "nibble.lineup"},
          {"schema_version", "1.0.0"},
          {"rule", "ranked by median GPU span (the grader's clock for --clock wall reports) among the Passed reports "
                   "of the first row's group (task, config, GPU, schema major, clock, graph-record mode: a report that "
                   "launched no CUDA graph goes with either); speedup = the first row's median "
                   "/ the row's"},
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
      << html_escape(median_text(x, unit)) << "</td><td>" << q << "</td><td>"
      << (std::isnan(x.fraction_of_floor) ? "-" : num(100 * x.fraction_of_floor, "%.1f") + "%") << "</td><td>"
      << (std::isnan(x.speedup_vs_first) ? "-" : num(x.speedup_vs_first, "%.2f") + "x") << "</td><td>"
      << num(x.worst_rel_err, "%.3g") << "</td><td>" << html_escape(x.gpu) << "</td><td><code>" << html_escape(x.commit.substr(0, 12))
      << "</code></td><td>" << html_escape(note) << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

// ---------------------------------------------------------------------------------------------
// The leaderboard

const char* const kLeaderboardRule =
    "one group per task and config; in a group, the Passed, timed reports of one GPU model and report schema major (the "
    "one with the most of them; ties: the newer schema, then more reports, then the newest report, then the GPU's name) are ranked by median GPU span (by the grader's clock for a set graded with --clock wall, with graphs recorded whole for "
    "one graded with --graph-records graphs whose timed calls launched CUDA graphs: neither ever mixed; a report that "
    "launched none is ranked in either), the group's "
    "reports of another GPU, schema, clock or graph-record mode are listed apart with the reason, and a report that did not pass is listed, never "
    "ranked; speedup over a bundled baseline = the baseline's median / the row's, for ranked rows only";

namespace {

/** Which of `rows` (the reports `idx` of one task and config) holds the ranked set's first report:
 *  the lineup group with the most rankable rows; ties: the newer schema, more rows, the newest
 *  report (created_utc), the group's name (GPU, ...): never the order the reports were given in. */
size_t ranked_set_anchor(const std::vector<LineupRow>& rows, const std::vector<ReportView>& reports, const std::vector<size_t>& idx) {
  struct Set {
    std::string group;
    int rankable = 0, schema = 0, total = 0;
    size_t first = 0;
    std::string newest;  // created_utc, ISO 8601: ordered as text
  };
  std::vector<Set> sets;
  for (size_t k = 0; k < rows.size(); ++k) {
    auto it = std::find_if(sets.begin(), sets.end(), [&](const Set& s) { return s.group == rows[k].group; });
    if (it == sets.end()) it = sets.insert(sets.end(), Set{rows[k].group, 0, reports[idx[k]].schema_major, 0, k, ""});
    it->rankable += rankable(rows[k]) && figure_problem(reports[idx[k]]).empty();  // an edited report picks nothing
    ++it->total;
    it->newest = std::max(it->newest, reports[idx[k]].created_utc);
  }
  // A report that launched no CUDA graph ranks in the whole-graph set of its group too (apart_from):
  // it counts for both.
  for (Set& s : sets)
    for (size_t k = 0; k < rows.size(); ++k)
      if (figure_graph_records(reports[idx[k]]).empty() && group_of(reports[idx[k]], true) == s.group) {
        s.rankable += rankable(rows[k]) && figure_problem(reports[idx[k]]).empty();
        ++s.total;
        s.newest = std::max(s.newest, reports[idx[k]].created_utc);
      }
  return std::max_element(sets.begin(), sets.end(), [](const Set& a, const Set& b) {
           return std::tie(a.rankable, a.schema, a.total, a.newest, a.group) <
                  std::tie(b.rankable, b.schema, b.total, b.newest, b.group);
         })->first;
}

}  // namespace

std::vector<LeaderboardGroup> make_leaderboard(const std::vector<ReportView>& reports, const std::vector<std::string>& labels,
                                               const BaselinesOf& baselines_of) {
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> by_task_config;
  for (size_t i = 0; i < reports.size(); ++i) by_task_config[{reports[i].task, reports[i].config}].push_back(i);
  std::vector<LeaderboardGroup> groups;
  for (const auto& [key, idx] : by_task_config) {
    std::vector<LineupRow> rows;
    for (size_t i : idx) rows.push_back(row_of(reports[i], label_of(reports, labels, i)));
    const ReportView& anchor = reports[idx[ranked_set_anchor(rows, reports, idx)]];
    // The anchor heads the set it was chosen as (its group): a report that launched no graph
    // counts in the whole-graph set too, but an anchor is the first report of its own group.
    const bool set_whole = graphs_whole(anchor);
    for (size_t k = 0; k < idx.size(); ++k) rows[k].apart = apart_from(reports[idx[k]], anchor, set_whole);
    rank_comparable(rows);
    for (LineupRow& x : rows)
      if (x.apart.empty()) x.group = group_of(anchor, set_whole);  // the set it ranks in
    const auto place = [](const LineupRow& x) { return x.rank ? x.rank : x.apart.empty() ? INT_MAX - 1 : INT_MAX; };
    std::stable_sort(rows.begin(), rows.end(), [&](const LineupRow& a, const LineupRow& b) { return place(a) < place(b); });

    LeaderboardGroup g;
    g.task = key.first;
    g.config = key.second;
    g.known_task = task_or_null(g.task) != nullptr;
    g.unit = anchor.unit;
    g.gpu = anchor.device_name;
    g.schema_major = anchor.schema_major;
    g.clock = anchor.clock;
    g.graph_records = set_whole ? "graphs" : "nodes";  // "nodes": by nodes, or no graph launched
    g.ranked = group_of(anchor, set_whole);
    if (baselines_of) g.baseline_solutions = baselines_of(g.task);
    for (const std::string& name : g.baseline_solutions) {
      // rows are in rank order: the first ranked row of that solution is its fastest report
      const auto b = std::find_if(rows.begin(), rows.end(), [&](const LineupRow& x) { return x.rank && x.solution == name; });
      if (b != rows.end()) g.baselines.push_back({name, b->label, b->median_us});
    }
    for (LineupRow& x : rows) {
      LeaderboardRow r{std::move(x), {}};
      for (const LeaderboardBaseline& b : g.baselines) r.speedup.push_back(r.row.rank ? b.median_us / r.row.median_us : NAN);
      g.rows.push_back(std::move(r));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

namespace {

/** A group's table as strings, the one source of the text, Markdown and HTML tables. */
struct BoardTable {
  std::vector<std::string> head;
  std::vector<std::string> style;  // per column: "" a number (right-aligned), "t" text (left-aligned), "t path" a file
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> kind;  // per row: "pass" (ranked), "fail" (in the ranked set, not ranked), "apart"
};

BoardTable board_table(const LeaderboardGroup& g) {
  BoardTable t;
  const auto col = [&](const std::string& name, const char* style) {
    t.head.push_back(name);
    t.style.push_back(style);
  };
  col("rank", "");
  col("solution", "t");
  col("disposition", "t");
  col("median us/" + (g.unit.empty() ? std::string("sample") : g.unit), "");
  col("q1 - q3", "");
  col("of floor", "");
  for (const LeaderboardBaseline& b : g.baselines) col("vs " + b.solution, "");
  col("worst err", "");
  col("gate", "");
  col("GPU", "t");
  col("commit", "t");
  col("report", "t path");
  col("note", "t");
  for (const LeaderboardRow& r : g.rows) {
    const LineupRow& x = r.row;
    std::vector<std::string> c{x.rank ? std::to_string(x.rank) : "-",
                               x.solution,
                               x.disposition,
                               num(x.median_us, "%.5g"),
                               std::isnan(x.q1_us) ? "-" : num(x.q1_us, "%.4g") + " - " + num(x.q3_us, "%.4g"),
                               std::isnan(x.fraction_of_floor) ? "-" : num(100 * x.fraction_of_floor, "%.1f") + "%"};
    for (double v : r.speedup) c.push_back(std::isnan(v) ? "-" : num(v, "%.2f") + "x");
    c.push_back(num(x.worst_rel_err, "%.3g"));
    c.push_back(num(x.gate, "%.3g"));
    c.push_back(x.gpu.empty() ? "-" : x.gpu);
    c.push_back(x.commit.empty() ? "-" : x.commit.substr(0, 12));
    c.push_back(x.label);
    c.push_back(!x.apart.empty()         ? "not ranked: " + x.apart
                : x.disposition != "Passed" ? x.reason
                : x.rank == 0               ? "not ranked: no GPU span in the report"
                                            : "");
    t.cells.push_back(std::move(c));
    t.kind.push_back(!x.apart.empty() ? "apart" : x.rank ? "pass" : "fail");
  }
  return t;
}

std::string title_of(const LeaderboardGroup& g) {
  // A name this nibble does not know (a later task, or one edited: "task " with a space) is said, so
  // that its group is never taken for the known task's.
  return g.task + " / " + g.config + (g.known_task ? "" : " (a task this nibble does not know)");
}

/** What the group ranks, in words. */
std::string ranked_words(const LeaderboardGroup& g) {
  size_t ranked = 0, in_set = 0;
  for (const LeaderboardRow& r : g.rows) {
    ranked += r.row.rank > 0;
    in_set += r.row.apart.empty();
  }
  return std::string(g.clock == "wall" ? "Ranked by median time on the grader's clock (--clock wall)" : "Ranked by median GPU span") +
         (g.graph_records == "graphs" ? " with CUDA graphs recorded whole (--graph-records graphs)" : "") +
         ": the Passed reports on " + (g.gpu.empty() ? std::string("no GPU recorded") : g.gpu) +
         " under report schema " + std::to_string(g.schema_major) + " (" + std::to_string(ranked) + " ranked of " +
         std::to_string(in_set) + " there; " + std::to_string(g.rows.size() - in_set) + " listed apart)";
}

/** Which baselines the speedups are over, or why there are none. */
std::string baseline_words(const LeaderboardGroup& g) {
  if (g.baseline_solutions.empty()) return "No baseline in this group (the task has no bundled baseline)";
  if (g.baselines.empty()) {
    std::string names;
    for (const std::string& n : g.baseline_solutions) names += (names.empty() ? "" : ", ") + n;
    return "No baseline in this group (the task's bundled baselines, " + names + ", have no ranked report here)";
  }
  std::string s = "Speedup over the bundled baselines (their median / the row's): ";
  for (size_t k = 0; k < g.baselines.size(); ++k)
    s += (k ? ", " : "") + g.baselines[k].solution + " " + num(g.baselines[k].median_us, "%.5g") + " us (" + g.baselines[k].label + ")";
  return s;
}

std::string count_words(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread) {
  size_t n = 0;
  for (const LeaderboardGroup& g : groups) n += g.rows.size();
  return std::to_string(n) + " report" + (n == 1 ? "" : "s") + " in " + std::to_string(groups.size()) + " group" +
         (groups.size() == 1 ? "" : "s") + " (task / config)" +
         (unread.empty() ? std::string()
                         : "; " + std::to_string(unread.size()) + " file" + (unread.size() == 1 ? "" : "s") +
                               " that did not read as a report, listed at the end");
}

const char* const kUnreadTitle = "Files that did not read";
const char* const kUnreadNote =
    "Each may be or hold a report and could not be read (a *.json that is not JSON or whose schema is nibble.report "
    "and does not read as one; a folder that cannot be listed, a link to a folder or to nothing): not ranked. Grade a "
    "report cut short or edited again; move out what is not one";

/** GitHub Markdown: a cell's text with the characters that would end it or format it escaped. */
std::string md_escape(const std::string& s) {
  std::string o;
  for (char c : one_line(s)) {  // no control character (a newline ends the row, ESC colours a terminal that shows the file)
    if (std::strchr("\\|`*_[]<>#", c)) o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

std::string format_leaderboard(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread) {
  std::ostringstream o;
  o << "leaderboard: " << count_words(groups, unread) << "\n";
  for (const LeaderboardGroup& g : groups) {
    BoardTable t = board_table(g);
    // One line per row: a control character a report carries (a newline in a solution's name)
    // would break the table's lines and columns; Markdown and HTML escape it themselves.
    for (auto& row : t.cells)
      for (std::string& c : row) c = one_line(std::move(c));
    std::vector<size_t> width(t.head.size());
    for (size_t c = 0; c < t.head.size(); ++c) {
      width[c] = t.head[c].size();
      for (const auto& row : t.cells) width[c] = std::max(width[c], row[c].size());
    }
    const auto line = [&](const std::vector<std::string>& cells) {
      std::string l = " ";
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string pad(width[c] - cells[c].size(), ' ');
        l += " " + (c + 1 == cells.size() ? cells[c] : !t.style[c].empty() ? cells[c] + pad : pad + cells[c]);
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      return l + "\n";
    };
    o << "\n" << title_of(g) << "\n  " << ranked_words(g) << "\n  " << baseline_words(g) << "\n" << line(t.head);
    for (const auto& row : t.cells) o << line(row);
  }
  if (!unread.empty()) o << "\n" << kUnreadTitle << "\n  " << kUnreadNote << "\n";
  for (const UnreadReport& u : unread) o << "  " << one_line(u.path) << ": " << one_line(u.reason) << "\n";
  return o.str();
}

std::string leaderboard_markdown(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread) {
  std::ostringstream o;
  o << "# nibble leaderboard\n\n" << md_escape(count_words(groups, unread)) << ". Rule: " << md_escape(kLeaderboardRule) << ".\n";
  for (const LeaderboardGroup& g : groups) {
    const BoardTable t = board_table(g);
    o << "\n## " << md_escape(title_of(g)) << "\n\n" << md_escape(ranked_words(g)) << ". " << md_escape(baseline_words(g)) << ".\n\n|";
    for (const std::string& h : t.head) o << " " << md_escape(h) << " |";
    o << "\n|";
    for (const std::string& style : t.style) o << (style.empty() ? " ---: |" : " :--- |");
    o << "\n";
    for (const auto& row : t.cells) {
      o << "|";
      for (const std::string& c : row) o << " " << md_escape(c) << " |";
      o << "\n";
    }
  }
  if (!unread.empty()) o << "\n## " << kUnreadTitle << "\n\n" << md_escape(kUnreadNote) << ".\n\n| file | reason |\n| :--- | :--- |\n";
  for (const UnreadReport& u : unread) o << "| " << md_escape(u.path) << " | " << md_escape(u.reason) << " |\n";
  return o.str();
}

std::string leaderboard_html(const std::vector<LeaderboardGroup>& groups, const std::vector<UnreadReport>& unread) {
  std::ostringstream o;
  o << html_page_begin("nibble leaderboard", /*wide=*/true) << "<h1>nibble leaderboard</h1>\n<p class=\"sub\">" << html_escape(count_words(groups, unread))
    << "</p>\n<p class=\"note\">Rule: " << html_escape(kLeaderboardRule) << ".</p>\n";
  for (size_t k = 0; k < groups.size(); ++k) {
    const LeaderboardGroup& g = groups[k];
    const BoardTable t = board_table(g);
    o << "<h2>" << html_escape(title_of(g)) << "</h2>\n<p class=\"note\">" << html_escape(ranked_words(g)) << ". "
      << html_escape(baseline_words(g)) << ".</p>\n<div class=\"scroll\">\n<table class=\"lineup board\" id=\"group-" << k
      << "\">\n<tr>";
    const auto cls = [&](size_t c) { return t.style[c].empty() ? std::string() : " class=\"" + t.style[c] + "\""; };
    for (size_t c = 0; c < t.head.size(); ++c) o << "<th" << cls(c) << ">" << html_escape(t.head[c]) << "</th>";
    o << "</tr>\n";
    for (size_t r = 0; r < t.cells.size(); ++r) {
      o << "<tr class=\"" << t.kind[r] << "\">";
      for (size_t c = 0; c < t.head.size(); ++c) o << "<td" << cls(c) << ">" << html_escape(t.cells[r][c]) << "</td>";
      o << "</tr>\n";
    }
    o << "</table>\n</div>\n";
  }
  if (!unread.empty()) {
    o << "<h2>" << kUnreadTitle << "</h2>\n<p class=\"note\">" << html_escape(kUnreadNote)
      << ".</p>\n<div class=\"scroll\">\n<table class=\"lineup board\" id=\"unread\">\n<tr><th class=\"t path\">file</th><th class=\"t\">reason</th></tr>\n";
    for (const UnreadReport& u : unread)
      o << "<tr class=\"apart\"><td class=\"t path\">" << html_escape(u.path) << "</td><td class=\"t\">" << html_escape(u.reason) << "</td></tr>\n";
    o << "</table>\n</div>\n";
  }
  o << "<p class=\"note\">Written by <code>nibble leaderboard</code> from the reports alone; self-contained: no script, no "
       "network.</p>\n"
    << html_page_end();
  return o.str();
}

nlohmann::ordered_json leaderboard_json(const std::vector<LeaderboardGroup>& groups, const std::vector<std::string>& inputs,
                                        const std::vector<UnreadReport>& unread) {
  nlohmann::ordered_json gs = nlohmann::ordered_json::array();
  for (const LeaderboardGroup& g : groups) {
    nlohmann::ordered_json baselines = nlohmann::ordered_json::array(), rows = nlohmann::ordered_json::array();
    for (const LeaderboardBaseline& b : g.baselines)
      baselines.push_back({{"solution", b.solution}, {"label", b.label}, {"median_us", or_null(b.median_us)}});
    for (const LeaderboardRow& r : g.rows) {
      nlohmann::ordered_json x = row_json(r.row);
      x.erase("speedup_vs_first");  // a lineup's; a leaderboard has no first row
      nlohmann::ordered_json speedup = nlohmann::ordered_json::object();
      for (size_t k = 0; k < g.baselines.size(); ++k) speedup[g.baselines[k].solution] = or_null(r.speedup[k]);
      x["speedup_vs_baselines"] = speedup;
      rows.push_back(std::move(x));
    }
    gs.push_back({{"task", g.task},
                  {"known_task", g.known_task},
                  {"config", g.config},
                  {"unit", g.unit},
                  {"ranked", g.ranked},
                  {"gpu", g.gpu},
                  {"schema_major", g.schema_major},
                  {"clock", g.clock},
                  {"graph_records", g.graph_records},
                  {"baseline_solutions", g.baseline_solutions},
                  {"baselines", baselines},
                  {"baseline_note", g.baselines.empty() ? baseline_words(g) : ""},
                  {"rows", rows}});
  }
  nlohmann::ordered_json un = nlohmann::ordered_json::array();
  for (const UnreadReport& u : unread) un.push_back({{"path", u.path}, {"reason", u.reason}});
  return {{"schema", "nibble.leaderboard"}, {"schema_version", "1.1.0"}, {"rule", kLeaderboardRule}, {"inputs", inputs},
          {"groups", gs}, {"unread", un}};
}

}  // namespace nibble
