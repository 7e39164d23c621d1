// report_cli.cpp: `nibble compare`, `nibble report` and `nibble leaderboard` argument parsing (see
// report_cli.h).
#include "harness/report_cli.h"
#include "fixtures/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include <unistd.h>

#include "harness/atomic_file.h"
#include "harness/cli_errors.h"
#include "harness/grade_common.h"
#include "harness/compare.h"
#include "harness/html_report.h"
#include "harness/lineup.h"
#include "harness/provenance.h"
#include "harness/report_view.h"
#include "harness/task_anchors.h"
#include "fixtures/sha256.h"

namespace nibble {

namespace {

/** A `nibble calibrate` table for `report`'s task and config; BadReport otherwise. */
nlohmann::ordered_json load_calibration(const std::string& path, const nlohmann::ordered_json& report) {
  nlohmann::ordered_json c;
  try {
    c = parse_ordered_json_bounded(read_file(path), path);
  } catch (const std::exception& e) {
    throw BadReport(std::string("--calibration: ") + e.what());  // says which: unreadable, not JSON, a key twice
  }
  if (!c.is_object() || c.value("schema", "") != "nibble.calibration" || !c.contains("rows") || !c["rows"].is_array())
    throw BadReport(path + ": not a nibble calibration table (schema \"nibble.calibration\" with \"rows\")");
  if (c.value("task", "") != report["task"] || c.value("config", "") != report["config"])
    throw BadReport(path + ": calibrated for " + c.value("task", "?") + " / " + c.value("config", "?") + ", the report is " +
                    report["task"].get<std::string>() + " / " + report["config"].get<std::string>());
  return c;
}

/** The reports RESULTS name, each labelled by its path, and the files in its folders that look like
 *  reports and did not read. */
struct FoundReports {
  std::vector<ReportView> views;
  std::vector<std::string> labels;
  std::vector<UnreadReport> unread;
  std::vector<std::string> opened;  // every file read (reports, copies, unread, other JSON): no output may be one
};

/** A reason as long as a page line may reasonably be: a parse error quotes the file, which may be
 *  50 MB of one string. */
std::string capped(const std::string& why) {
  constexpr size_t kMax = 600;
  return why.size() <= kMax ? why : why.substr(0, kMax) + "... (" + std::to_string(why.size() - kMax) + " more bytes)";
}

/** Every *.json below `dir` that is a regular file (a link to one included) into `files`; what
 *  cannot be looked at goes to `unread` with the reason, never dropped unseen: a folder that cannot
 *  be listed, a *.json that is no file (a dangling link, a FIFO), a link to a folder (not followed:
 *  name the folder itself). */
void list_json_files(const std::filesystem::path& dir, std::vector<std::string>* files, std::vector<UnreadReport>* unread) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
  if (ec) {
    unread->push_back({dir.string(), dir.string() + ": cannot list the folder (" + ec.message() +
                                         "): any report in it is not on the board; make it readable or move it out"});
    return;
  }
  for (const fs::directory_entry& e : entries) {
    std::error_code fe;
    const std::string p = e.path().string();
    const bool link = e.is_symlink(fe), folder = e.is_directory(fe);
    if (folder && !link) {
      list_json_files(e.path(), files, unread);
    } else if (folder) {
      unread->push_back({p, p + ": a link to a folder, not followed (a link may loop): name the folder itself"});
    } else if (e.path().extension() == ".json") {
      if (e.is_regular_file(fe))
        files->push_back(p);
      else
        unread->push_back({p, p + (link && !e.exists(fe) ? ": a link to nothing" : ": not a regular file (a FIFO, a device)") +
                                  ", not read"});
    }
  }
}

/**
 * A file in `results` is read as a report: one that is not is bad input (BadReport), as in
 * `report html`. A folder is searched recursively, in path order, for *.json whose "schema" is
 * "nibble.report"; other JSON there (lineup.json, calibration tables, a leaderboard's own JSON) is
 * skipped silently, while a file that says it is a report and does not read as one, or a *.json that
 * is not JSON at all (most likely a report cut short: nibble writes its files atomically, so nothing
 * of its own is ever half-written there), goes to `unread` with the reason: a torn report must not
 * drop out of the ranking unseen, nor one bad file in a shared folder stop the board of the others.
 * A file met twice (named, and inside a folder also named), or two files of the same JSON (a report
 * copied to another folder), is one row.
 */
FoundReports find_reports(const std::vector<std::string>& results) {
  namespace fs = std::filesystem;
  FoundReports found;
  std::set<std::string> seen, seen_bytes;
  // `report`: what was parsed (a file is read once: a pipe given twice would read empty the second time).
  const auto add = [&](const std::string& path, const nlohmann::ordered_json& report, ReportView view) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(path, ec);
    if (!seen.insert(ec ? path : canonical.string()).second) return;
    const std::string text = report.dump();
    if (!seen_bytes.insert(sha256_hex(text.data(), text.size())).second) return;
    found.views.push_back(std::move(view));
    found.labels.push_back(path);
  };
  for (const std::string& in : results) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      found.opened.push_back(in);
      const nlohmann::ordered_json report = load_report(in);
      add(in, report, graded_report_view(report));
      continue;
    }
    std::vector<std::string> files;
    list_json_files(in, &files, &found.unread);
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      found.opened.push_back(f);
      nlohmann::ordered_json j;
      try {
        j = parse_ordered_json_bounded(read_file(f), f, kReportJsonDepth);
      } catch (const std::exception& e) {  // it may be a report: a torn or edited one must not drop out unseen
        found.unread.push_back({f, capped(e.what())});
        continue;
      }
      // An earlier board of `nibble leaderboard --json` is its output, never an input: the same
      // command run again rewrites it (other JSON stays protected from being written over).
      if (j.is_object() && j.contains("schema") && j["schema"] == "nibble.leaderboard") found.opened.pop_back();
      if (!j.is_object() || !j.contains("schema") || j["schema"] != "nibble.report") continue;
      try {
        ReportView view = read_report_view(j, f);
        add(f, j, std::move(view));
      } catch (const BadReport& e) {
        found.unread.push_back({f, capped(e.what())});
      }
    }
  }
  std::stable_sort(found.unread.begin(), found.unread.end(),
                   [](const UnreadReport& a, const UnreadReport& b) { return a.path < b.path; });
  return found;
}

[[noreturn]] void finish(int code) {
  code = stdout_checked(code);
  std::fflush(stderr);
  std::exit(code);
}

}  // namespace

std::string version_line() { return std::string("nibble ") + NIBBLE_VERSION + " (built at " + build_commit() + ")"; }

void add_version_flags(CLI::App& app) {
  app.set_version_flag("--version", version_line);
  for (CLI::App* sc : app.get_subcommands([](const CLI::App*) { return true; })) add_version_flags(*sc);
}

std::string unknown_command(const CLI::App& app, const std::string& first, const std::string& shown) {
  const auto commands = app.get_subcommands([](const CLI::App*) { return true; });
  if (commands.empty() || first.empty() || first[0] == '-') return "";
  std::string names;
  for (const CLI::App* sc : commands) {
    if (sc->get_name() == first) return "";
    if (!sc->get_group().empty()) names += (names.empty() ? "" : ", ") + sc->get_name();
  }
  return "unknown command '" + first + "'; the commands are " + names + " (" + (shown.empty() ? app.get_name() : shown) + " --help)";
}

int parse_own_args(CLI::App& app, std::vector<std::string> args, int bad_input) {
  if (!args.empty())
    if (const std::string e = unknown_command(app, args.front()); !e.empty()) {
      std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), e.c_str());
      return bad_input;
    }
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector back to front
  add_version_flags(app);
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return bad_input;
  }
  return -1;
}

const CLI::Validator kNonEmptyValue([](std::string& v) { return v.empty() ? std::string("must not be empty") : std::string(); },
                                    "NONEMPTY");

int compare_command(std::vector<std::string> args) {
  CLI::App app{"Is NEW slower than BASE beyond noise? Per timed figure: the ratio of medians NEW/BASE with a bootstrap "
               "interval, a Mann-Whitney U p-value, and a verdict SAME / FASTER / SLOWER / UNSURE.",
               "nibble compare"};
  std::string base, neu;
  CompareOptions opt;
  bool as_json = false;
  app.add_option("BASE", base, "Baseline report (nibble grade --out)")->required();
  app.add_option("NEW", neu, "New report")->required();
  app.add_option("--max-slowdown", opt.max_slowdown_pct, "Tolerated slowdown, percent")->capture_default_str()->check(kNonEmptyValue);
  app.add_option("--alpha", opt.alpha, "Significance level (the interval is at 1 - alpha)")->capture_default_str()->check(kNonEmptyValue);
  app.add_option("--resamples", opt.resamples, "Bootstrap resamples")
      ->capture_default_str()
      ->check(kNonEmptyValue)
      ->check(CLI::Range(100, kMaxResamples));
  app.add_flag("--force", opt.force, "Compare reports that are not comparable (different task, config, fixture, GPU; no timing); the output says so");
  app.add_flag("--json", as_json, "Print the comparison as JSON (schema nibble.compare) instead of the table");
  app.footer(
      "Exit codes: 0 no significant slowdown beyond --max-slowdown; 1 a figure is SLOWER; 2 correctness regression "
      "(BASE Passed and NEW not, or NEW's worst error crossed the gate); 3 not comparable (task, config, fixture "
      "SHA-256, GPU model, or no timing) unless --force, and even with it for a schema version 1 report against a version 2 "
      "one (re-grade BASE), samples of another unit, figures of another --clock, or of another --graph-records where both "
      "reports launched CUDA graphs or cannot say they did not (a report before schema 2.7 graded by nodes: grade NEW with "
      "--graph-records nodes or BASE again); a correctness regression is 2 even then; 4 bad input (missing file, not a nibble report, a schema version other "
      "than 1.x and 2.x, bad arguments).");
  if (const int rc = parse_own_args(app, std::move(args), kCompareBadInput); rc >= 0) return rc;
  return compare_files(base, neu, opt, as_json);
}

int report_command(std::vector<std::string> args) {
  CLI::App app{"Read a nibble report back: its summary, or a self-contained HTML page.", "nibble report"};
  app.require_subcommand(1);
  std::string show_path;
  auto* show = app.add_subcommand("show", "Print the summary nibble grade printed at its end, from the report alone");
  show->add_option("REPORT", show_path, "Report (nibble grade --out)")->required();
  std::string html_path, html_base, html_out, html_calibration;
  CompareOptions opt;
  auto* html = app.add_subcommand("html", "Write one self-contained HTML page (inline CSS and SVG; no script, no network)");
  html->add_option("REPORT", html_path, "Report to show")->required();
  CLI::Option* html_base_opt = html->add_option("BASE", html_base, "Optional baseline report: adds nibble compare's table");
  html->add_option("-o,--out", html_out, "HTML file to write (atomically)")->required()->check(kNonEmptyValue);
  std::vector<std::string> html_beside;
  html->add_option("--beside", html_beside,
                   "Other graded reports (repeatable): bars in the roofline when of the same task, config and GPU, and a "
                   "side-by-side table ranked by median (e.g. the PyTorch anchors graded in the same run)")
      ->check(kNonEmptyValue);
  html->add_option("--calibration", html_calibration,
                   "nibble calibrate's table (same task and config): its variants become the error chart's reference points")->check(kNonEmptyValue);
  // Only with BASE: without one there is no comparison for them to change (given alone, refused).
  html->add_option("--max-slowdown", opt.max_slowdown_pct, "With BASE: tolerated slowdown, percent")
      ->capture_default_str()
      ->check(kNonEmptyValue)
      ->needs(html_base_opt);
  html->add_option("--alpha", opt.alpha, "With BASE: significance level")->capture_default_str()->check(kNonEmptyValue)->needs(html_base_opt);
  html->add_option("--resamples", opt.resamples, "With BASE: bootstrap resamples")
      ->capture_default_str()
      ->check(kNonEmptyValue)
      ->check(CLI::Range(100, kMaxResamples))
      ->needs(html_base_opt);
  app.footer("Exit codes: 0 done; 1 (html) the page could not be written; 4 bad input (missing file, not a nibble report, bad arguments, an -o that names a folder or -; show: a report whose median is not its samples', printed and said).");
  for (CLI::App* sc : {show, html}) sc->footer(app.get_footer());  // `report show --help` shows them too
  if (const int rc = parse_own_args(app, std::move(args), kCompareBadInput); rc >= 0) return rc;

  if (show->parsed()) {
    try {
      const ReportView v = load_report_view(show_path);
      std::cout << format_summary(v, show_path);
      // The summary prints the stored median: one that is not its samples' is said, and bad input.
      if (const std::string p = figure_problem(v); !p.empty()) {
        std::cout.flush();
        std::fprintf(stderr, "nibble report show: %s: %s; its figures above are not a grade's (grade it again)\n",
                     one_line(show_path).c_str(), one_line(p).c_str());
        return kCompareBadInput;
      }
    } catch (const BadReport& e) {
      std::fprintf(stderr, "nibble report show: %s\n", e.what());
      return kCompareBadInput;
    }
    return 0;
  }
  try {  // a name that can never take the page ('-', a folder) is bad input, found before the work
    check_output_name(html_out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble report html: -o: %s\n", e.what());
    return kCompareBadInput;
  }
  std::vector<std::string> inputs{html_path, html_base, html_calibration};
  inputs.insert(inputs.end(), html_beside.begin(), html_beside.end());
  for (const std::string& in : inputs)
    if (!in.empty() && same_output_file(html_out, in)) {
      std::fprintf(stderr, "nibble report html: -o %s is the page's input %s: writing it would destroy that input; choose another -o\n",
                   html_out.c_str(), in.c_str());
      return kCompareBadInput;
    }
  if (!(opt.max_slowdown_pct >= 0) || !(opt.alpha > 0 && opt.alpha < 1)) {
    std::fprintf(stderr, "nibble report html: --max-slowdown must be >= 0 and --alpha in (0, 1)\n");
    return kCompareBadInput;
  }
  ReportView report, base;
  try {
    nlohmann::ordered_json r = load_report(html_path);
    // The table's rows become the report's calibration (read_report_view reads a top-level one).
    if (!html_calibration.empty()) r["calibration"] = load_calibration(html_calibration, r);
    report = read_report_view(r, html_path);
    if (!html_base.empty()) base = load_report_view(html_base);
  } catch (const BadReport& e) {
    std::fprintf(stderr, "nibble report html: %s\n", e.what());
    return kCompareBadInput;
  }
  // A BASE of another task (decode against a GEMM) has no figure in common: refuse it, as a
  // calibration table of another task is refused, rather than draw verdicts across tasks.
  if (!html_base.empty() && base.task != report.task) {
    std::fprintf(stderr, "nibble report html: BASE %s is a %s report, REPORT %s a %s one: not comparable\n", html_base.c_str(),
                 base.task.c_str(), html_path.c_str(), report.task.c_str());
    return kCompareBadInput;
  }
  if (const std::string p = html_base.empty() ? "" : comparison_input_problem(base, report, opt, html_base, html_path);
      !p.empty()) {
    std::fprintf(stderr, "nibble report html: %s\n", p.c_str());
    return kCompareBadInput;
  }
  // The page draws the stored medians: a report whose figures are not its samples' is bad input here
  // too, as for `report show` (with a BASE, comparison_input_problem above has said so already).
  if (const std::string p = figure_problem(report); !p.empty()) {
    std::fprintf(stderr, "nibble report html: %s: %s; its figures are not a grade's (grade it again)\n", one_line(html_path).c_str(),
                 one_line(p).c_str());
    return kCompareBadInput;
  }
  HtmlAnchors anchors{task_error_anchors(report.task, report.config), {}, {}};
  for (const std::string& b : html_beside) {
    try {
      anchors.beside.push_back(load_report_view(b));
      if (const std::string p = figure_problem(anchors.beside.back()); !p.empty())
        throw BadReport(b + ": " + p);
      anchors.beside_labels.push_back(b);
    } catch (const BadReport& e) {
      std::fprintf(stderr, "nibble report html: --beside %s\n", e.what());
      return kCompareBadInput;
    }
  }
  std::string page;
  if (html_base.empty()) {
    page = render_html_report(report, html_path, anchors);
  } else {
    const Comparison c = compare_reports(base, report, opt, html_base, html_path);
    // Figures of another schema version or unit would be drawn beside this report's as if they
    // were the same measurement. Another clock or graph-record mode: the page says so and draws
    // none of BASE's times (render_html_report).
    if (!c.refused.empty() && !c.refused_timing_only) {
      std::fprintf(stderr, "nibble report html: BASE %s: %s\n", html_base.c_str(), c.result.c_str());
      return kCompareBadInput;
    }
    page = render_html_report(report, html_path, anchors, &base, html_base, &c);
  }
  try {
    write_file_atomic(html_out, page);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble report html: %s\n", e.what());
    return write_failed_code(e, 1);
  }
  // a status line, on stderr: with -o /dev/stdout the page alone is on stdout
  std::fprintf(stderr, "nibble report html: wrote %s (%zu bytes)\n", html_out.c_str(), page.size());
  return 0;
}

int leaderboard_command(std::vector<std::string> args) {
  CLI::App app{"Rank graded reports: one table per task and config, the Passed reports of one GPU model and report schema "
               "ranked by median GPU span, or apart by the grader's clock for --clock wall reports, and apart by CUDA graphs "
               "recorded whole or by nodes where a report launched graphs (quartiles, fraction of the "
               "floor, speedup over the task's bundled baselines, "
               "error against the gate, disposition, GPU, commit); reports of another GPU, schema, clock or graph-record "
               "mode listed apart with the reason. The text table goes to stdout (to stderr when an output is stdout); -o, --markdown and --json write "
               "files.",
               "nibble leaderboard"};
  std::vector<std::string> results;
  std::string html_out, md_out, json_out;
  app.add_option("RESULTS", results,
                 "Reports, or folders searched recursively for them (every *.json whose schema is nibble.report; other "
                 "JSON there is skipped, a *.json that is not JSON is bad input)")
      ->required()
      ->check(kNonEmptyValue);
  app.add_option("-o,--out", html_out, "HTML page to write (atomically; inline CSS, no script, no network)")->check(kNonEmptyValue);
  app.add_option("--markdown", md_out, "GitHub Markdown file to write (atomically): a table per group")->check(kNonEmptyValue);
  app.add_option("--json", json_out, "JSON file to write (atomically): schema nibble.leaderboard, every row's fields")
      ->check(kNonEmptyValue);
  app.footer("Exit codes: 0 done; 1 a file could not be written; 4 bad input (a "
             "missing file, a file named that is not a nibble report, no report at all, an output named '-' or a "
             "folder, bad arguments; or a file in a folder that looks like a report and does not read, or a report whose "
             "figure is not its samples' (edited): the board is "
             "still written, that file listed on it with the reason).");
  if (const int rc = parse_own_args(app, std::move(args), kCompareBadInput); rc >= 0) return rc;
  FoundReports found;
  try {
    found = find_reports(results);
  } catch (const BadReport& e) {
    std::fprintf(stderr, "nibble leaderboard: %s\n", e.what());
    return kCompareBadInput;
  }
  if (found.views.empty() && found.unread.empty()) {
    std::fprintf(stderr, "nibble leaderboard: no nibble report in the RESULTS given\n");
    return kCompareBadInput;
  }
  std::vector<std::pair<std::string, std::string>> outputs;  // (path, option)
  for (const auto& [path, option] : {std::pair{html_out, "-o"}, std::pair{md_out, "--markdown"}, std::pair{json_out, "--json"}})
    if (!path.empty()) outputs.emplace_back(path, option);
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const std::string& in : found.opened)
      if (same_output_file(outputs[i].first, in)) {
        std::fprintf(stderr, "nibble leaderboard: %s %s is the input %s: writing it would destroy that input; choose another\n",
                     outputs[i].second.c_str(), outputs[i].first.c_str(), in.c_str());
        return kCompareBadInput;
      }
    for (size_t k = 0; k < i; ++k)
      if (same_output_file(outputs[i].first, outputs[k].first)) {
        std::fprintf(stderr, "nibble leaderboard: %s and %s name the same file %s\n", outputs[k].second.c_str(),
                     outputs[i].second.c_str(), outputs[i].first.c_str());
        return kCompareBadInput;
      }
    try {  // a name that is not a file's ('-', a folder) is bad input, as in report html
      check_output_name(outputs[i].first);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble leaderboard: %s %s\n", outputs[i].second.c_str(), e.what());
      return kCompareBadInput;
    }
    try {  // before anything is written or shown: a path that cannot take the file stops them all
      check_writable(outputs[i].first);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble leaderboard: %s %s\n", outputs[i].second.c_str(), e.what());
      return 1;
    }
  }

  const std::vector<LeaderboardGroup> groups = make_leaderboard(found.views, found.labels, task_baseline_solutions);
  // The table on stdout, unless an output is stdout itself (--json /dev/stdout: that alone, for a pipe).
  const bool stdout_taken = std::any_of(outputs.begin(), outputs.end(),
                                        [](const auto& o) { return standard_stream_fd(o.first) == STDOUT_FILENO; });
  std::ostream& table = stdout_taken ? std::cerr : std::cout;
  table << format_leaderboard(groups, found.unread);
  table.flush();
  // The board is written whole, the files that did not read listed on it; the exit says they exist.
  for (const UnreadReport& u : found.unread)
    std::fprintf(stderr, "nibble leaderboard: not ranked, did not read: %s\n", one_line(u.reason).c_str());
  int rc = found.unread.empty() ? 0 : kCompareBadInput;
  // A report whose figure is not its samples' (edited) is listed apart on the board: bad input too.
  for (size_t i = 0; i < found.views.size(); ++i)
    if (const std::string p = figure_problem(found.views[i]); !p.empty()) {
      std::fprintf(stderr, "nibble leaderboard: not ranked, %s: %s\n", one_line(found.labels[i]).c_str(), one_line(p).c_str());
      rc = kCompareBadInput;
    }
  const auto write = [&](const std::string& path, const std::string& content) {
    if (path.empty()) return;
    try {
      write_file_atomic(path, content);
      std::fprintf(stderr, "nibble leaderboard: wrote %s (%zu bytes)\n", path.c_str(), content.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble leaderboard: %s\n", e.what());
      rc = write_failed_code(e, 1);
    }
  };
  write(html_out, html_out.empty() ? "" : leaderboard_html(groups, found.unread));
  write(md_out, md_out.empty() ? "" : leaderboard_markdown(groups, found.unread));
  write(json_out, json_out.empty() ? "" : json_text(leaderboard_json(groups, results, found.unread), 2) + "\n");
  return rc;
}

void add_report_commands(CLI::App& app) {
  auto* compare = app.add_subcommand("compare", "Compare two reports: is NEW slower than BASE beyond noise? (exit 0-4; compare --help)");
  auto* report = app.add_subcommand("report", "Show a report's summary, or write it as one HTML page (report show|html)");
  auto* leaderboard = app.add_subcommand(
      "leaderboard", "Rank many reports per task and config, against the bundled baselines (HTML, Markdown, JSON; leaderboard --help)");
  for (CLI::App* sub : {compare, report, leaderboard}) {
    sub->prefix_command();  // everything after the name goes to the command's own parser
    sub->set_help_flag();   // ... --help included
  }
  compare->callback([compare] { finish(compare_command(compare->remaining())); });
  report->callback([report] { finish(report_command(report->remaining())); });
  leaderboard->callback([leaderboard] { finish(leaderboard_command(leaderboard->remaining())); });
}

}  // namespace nibble
