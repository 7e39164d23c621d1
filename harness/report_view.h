// report_view.h: reading a `nibble grade` report back. read_report_view() turns a report of either
// schema (1.x, written by the two pipelines before issue 19; 2.x, docs/report-schema.md) into one
// plain struct, ReportView, and `nibble report show|html` and `nibble compare` read only that: they
// never look at a task's name, and a figure a task does not have is NaN or empty, not a branch.
//
// Every field beyond the identity ones is optional, so a report of a failed grade (no timing, NaN
// error) still reads.
#pragma once

#include "harness/anchors.h"

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nibble {

/** A file that is missing, unreadable, not JSON, or not a nibble report this nibble reads. The
 *  message names the file and what is wrong with it. */
struct BadReport : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** One timed figure (timing.gpu_span_us and the like): its summary and, where the report kept
 *  them, its raw samples (microseconds, or kernels for kernels_per_call). NaN where absent. */
struct FigureView {
  double median = NAN, q1 = NAN, q3 = NAN, min = NAN, max = NAN, mean = NAN, stdev = NAN;
  long long n = -1;  // -1: not recorded
  std::vector<double> samples;
  bool present = false;  // the report has this figure
};

/** correctness.per_seed[i]: the worst error of one seed over the outputs it checked. */
struct SeedErrorView {
  std::optional<uint64_t> seed;
  double worst_rel_err = NAN;  // NaN: null (a NaN/Inf output)
  long long checked = -1;      // samples (steps, calls) checked for this seed; -1: not recorded
};

/** fixtures[i], as compare and the page identify a fixture. */
struct FixtureView {
  std::string seed;  // as the report wrote it; "?" when absent
  std::string file_sha256;
};

/** Where the candidate sits in the drop-the-feature table: the report's top-level "calibration"
 *  (`report html --calibration` puts a whole table there) or correctness.calibration (what the
 *  grade records). present is false when the report has neither. */
struct CalibrationView {
  bool present = false;
  std::vector<ErrorAnchor> rows;
  double legitimate_variants_worst = NAN;
  double dropped_feature_variants_best = INFINITY;  // no must-fail row: +inf (JSON's null)
  std::string source, device, created_utc;
};

/** A report of either schema, in one set of names (docs/report-schema.md, version 2's). */
struct ReportView {
  // Identity.
  int schema_major = 1;
  std::string schema_version;  // as written; "" for a version 1 report without one
  std::string task, config;
  std::string disposition, reason;
  std::string rule;  // version 2 only: judge()'s rule that decided; "" for version 1

  // Provenance.
  std::string created_utc, nibble_version;
  std::string solution_name;  // solution.name, else the file name of solution.path, else "?"
  std::string solution_path, solution_sha256;
  /** The solution's facts the grade recorded (solution.facts: "c_dtype fp32", "int4_layout awq"),
   *  "key value" each, in the report's order; empty for a report without them. */
  std::vector<std::string> solution_facts;
  std::string reference_name, reference_numerics;
  std::string device_name;  // "" when the report has no device section
  std::string device_compute_capability, device_sms, device_driver;  // as written, "?" when absent
  double theoretical_bandwidth_Bps = NAN, copy_bandwidth_Bps = NAN;
  std::vector<FixtureView> fixtures;
  std::optional<std::string> git_commit;  // null in the report: nullopt
  bool git_dirty = false;
  std::string git_commit_from;
  std::string host_name, host_json;  // host.hostname; the whole host object on one line
  int host_cpus = 0;
  std::vector<std::string> argv;
  double wall_seconds_total = NAN;
  // The child's sandbox (schema 2.1): every layer as {name, state, detail}; empty for older reports.
  struct SandboxLayerView {
    std::string name, state, detail;
  };
  std::vector<SandboxLayerView> sandbox_layers;
  bool sandbox_required = false;

  // Correctness.
  double gate = NAN;
  double element_guard = NAN;  // NaN: the task has none (version 2's null; every version 1 report)
  std::string metric;
  bool worst_rel_err_recorded = false;  // false: the grade stopped before comparing any output
  double worst_rel_err = NAN;           // NaN: null (a NaN/Inf output) or not recorded
  std::vector<std::pair<std::string, double>> worst_by_output;  // output name, worst error
  double ratio_to_gate = NAN;
  std::vector<SeedErrorView> per_seed;
  CalibrationView calibration;

  // Timing: timed is false when the report has no timing section.
  bool timed = false;
  std::string unit;  // what one sample is: "token" (a decode step of the batch) or "call"; "" unknown
  double us_per_call = NAN;
  // The figure of merit's clock (timing.clock, schema 2.4): "span" (the CUPTI GPU span; every older
  // report) or "wall" (nibble grade --clock wall: the grader's clock less the ledger's overhead, in
  // grader_clock_us).
  std::string clock = "span";
  // timing.graph_records: "nodes" (a record per graph node; every report before it) or "graphs"
  // (nibble grade --graph-records graphs: one per graph launch).
  std::string graph_records = "nodes";
  FigureView graph_launches_per_call;  // timing.graph_launches_per_call: graph launches recorded whole
  long long graph_launches_audited = -1;  // timing.graph_launches_audited (schema 2.7); -1: absent
  /** timing.ledger.clocks.throttled_rounds_excluded_from_median: the graded figure's summary is of
   *  the rounds without a clock slowdown, its samples all of them. */
  bool throttled_rounds_excluded = false;
  FigureView gpu_span_us, host_wall_us, busy_us, kernels_per_call, grader_clock_us;
  double bytes_per_call = NAN, flops_per_call = NAN, tflops = NAN, achieved_bandwidth_Bps = NAN;
  std::string bytes_note;
  double floor_theoretical_bw_us = NAN, floor_measured_copy_bw_us = NAN;
  double floor_weight_read_us = NAN;  // NaN unless a positive finite number
  double fraction_of_measured_bw = NAN, fraction_of_theoretical_bw = NAN;
  // Host wall time is launch noise for this task (small GEMMs): compare shows it, does not judge it.
  bool host_wall_informational = false;
  std::string timing_protocol;  // one line: what is timed and what happens around each call
  double rounds = NAN, calls_per_round = NAN;
  std::string stop_reason, invalid_reason;
  double invalid_samples = NAN, nonfinite_outputs = NAN;
  // Between timed calls: gaps with the solution's GPU work (schema 2.0's gaps_with_foreign_kernels
  // counted kernels only), what they held, the harness's own records per gap.
  double gaps_with_foreign_work = NAN, harness_records_per_gap = NAN, late_kernels = NAN;
  std::string foreign_work;
  std::vector<std::pair<std::string, double>> verified_calls;  // call, rel err (NaN: null)
  std::string timing_seed_from;  // "os", "nibble grade --timing-seed", or "" (not recorded)
  std::vector<double> positions;  // per sample of gpu_span_us: its position (decode: the KV length); may be empty
};

/**
 * Reads a report of schema 1.x or 2.x already in memory; `what` names it in messages. Checks: a
 * JSON object with "schema" == "nibble.report", a schema_version of major 1 or 2 (absent reads as
 * 1), task (non-empty), config and disposition strings, "correctness" an object, a Passed grade
 * with a finite worst error, every timed figure present with positive numeric "samples", and for
 * version 2 a timing.unit of "token" or "call". Throws BadReport otherwise (a version 3 report
 * included: it may mean other things by the same keys).
 *
 * Version 1: the unit is inferred from the keys (us_per_token -> "token", us_per_call -> "call";
 * untimed: checked_steps -> "token", per-seed calls -> "call"); a "call" report's host wall time
 * is informational (the GEMM pipeline's), a "token" one's is not.
 */
ReportView read_report_view(const nlohmann::ordered_json& report, const std::string& what);

/** The same reading without the checks, for the report a grade has just built (whose timed calls
 *  without a valid GPU record leave 0 us samples, which read_report_view refuses). Never throws
 *  for the report's content: a field of the wrong type reads as absent. */
ReportView graded_report_view(const nlohmann::ordered_json& report);

/** How deep a report's JSON may nest (parse_ordered_json_bounded): a grade's report is ~6 deep; a
 *  100,000-deep value crashed the printing of its error. */
inline constexpr int kReportJsonDepth = 64;

/** The file at `path` as JSON, checked by read_report_view (BadReport otherwise). */
nlohmann::ordered_json load_report(const std::string& path);

/** load_report and read_report_view in one. */
ReportView load_report_view(const std::string& path);

/** read_report_view's checks alone. */
void validate_report(const nlohmann::ordered_json& report, const std::string& what);

/** The timed figures a report can carry, in display order: gpu_span_us, host_wall_us and (a --clock
 *  wall report) grader_clock_us. */
const std::vector<std::string>& timed_figures();

/** The figure of `report` named by timed_figures(). */
const FigureView& timed_figure(const ReportView& report, const std::string& figure);

/** The time `report` was graded by: grader_clock_us for a --clock wall report, else gpu_span_us. */
const FigureView& graded_time(const ReportView& report);

/** "median GPU span" or "median on the grader's clock": what graded_time's median is, for labels. */
std::string graded_time_label(const ReportView& report);

/** "" when `report`'s graded figure, and every other timed figure that keeps samples, is its samples'
 *  summary: their count its n, their median its
 *  median (where the grade left no throttled round out of it, else at least within their range and
 *  between its quartiles); otherwise why not, ending "an edited report". What ranks (leaderboard) is
 *  the stored median and what compare tests is the samples: a report whose two disagree was edited
 *  by hand and is neither ranked nor compared. A Passed report of schema 2 always keeps its samples. */
std::string figure_problem(const ReportView& report);

/** The --graph-records mode r's timed figure depends on: "" where its timed phase launched no CUDA
 *  graph (timing.graph_launches_audited 0; before 2.7, graded by "graphs" with no graph launch
 *  recorded in any call), so that it reads the same in either mode; else r.graph_records (a report
 *  graded by "nodes" before 2.7 cannot say it launched none). compare, lineup and leaderboard set
 *  reports of different modes apart only where both depend on them. */
std::string figure_graph_records(const ReportView& r);

/** `s` as UTF-8 (utf8_text) with every control character (a newline, ESC, NUL) a space: a report is anyone's file, and
 *  what `report show`, `compare` and the leaderboard print from it must not move the terminal's cursor
 *  or colour it (a newcomer's finding: an ESC in a solution's name reached the terminal). Every
 *  string the report view reads passes through it. */
std::string one_line(std::string s);

/** What one sample is called in prose: "step" for the unit "token" (one decode step of the batch),
 *  the unit itself otherwise ("call"), "sample" when unknown. */
std::string sample_noun(const std::string& unit);

/**
 * The summary `nibble grade` prints at its end, rebuilt from the report alone: task/config/GPU,
 * solution, disposition and reason, worst error per seed against the gate, GPU span median with
 * quartiles, host wall time and kernels per sample, the throughput (when the report has its FLOPs)
 * or roofline line, the weight-read floor when measured. `report_path`, when not empty, is printed
 * on the last line with the grade's total wall time.
 */
std::string format_summary(const ReportView& report, const std::string& report_path = "");

/** A report's timing in Google Benchmark's JSON format (context + one "iteration" entry per timed
 *  call + mean/median/stddev aggregates; times in us), for tools built for Google Benchmark.
 *  Reads `report` (the grade's own, either schema) through graded_report_view. */
nlohmann::ordered_json gbench_json(const nlohmann::ordered_json& report);

/** Append one JSON line (date, commit, GPU, task, config, solution, disposition, median, worst
 *  error, report path) to a history file. Reads `report` through graded_report_view. Throws
 *  std::runtime_error when it cannot append. */
void append_history(const std::string& path, const nlohmann::ordered_json& report, const std::string& report_path);

/** printf("%.*g", prec, v): the number format the grade's summary uses. */
std::string fmt_g(double v, int prec = 3);

}  // namespace nibble
