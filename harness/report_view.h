// report_view.h: reading a `nibble grade` report back: load and validate it, pull out its figures,
// and print the summary `nibble grade` prints at its end (`nibble report show`).
//
// The report's layout is written by harness/grade.cpp (schema "nibble.report"); this file only
// reads it, and treats every field beyond the identity ones as optional, so a report of a failed
// grade (no timing, NaN error) still reads.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble {

/** A file that is missing, unreadable, not JSON, or not a nibble report. The message names the
 *  file and what is wrong with it. */
struct BadReport : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/**
 * Reads and validates a report: JSON object, "schema" == "nibble.report", the identity fields
 * (task, config, disposition) are strings, "correctness" is an object, and every timed figure
 * present has a numeric "samples" array. Throws BadReport otherwise.
 */
nlohmann::ordered_json load_report(const std::string& path);

/** Same checks on a report already in memory; `what` names it in the message. */
void validate_report(const nlohmann::ordered_json& report, const std::string& what);

/** Whether `report` is a GEMM task's ("task" starts with "gemm-"): its samples are calls, not decode
 *  steps, and its host wall time is launch noise. False when "task" is absent or not a string. */
bool is_gemm_report(const nlohmann::ordered_json& report);

/** A GEMM report's weight-read floor (timing.floor_us_weight_read, us): the span of a kernel that
 *  only reads the shape's weight codes and scales under the same flush and timer. NaN when absent
 *  or not a positive finite number (reports graded before it existed, or edited by hand). */
double weight_read_floor_us(const nlohmann::ordered_json& report);

/** The timed figures a report can carry, in display order: timing.gpu_span_us, timing.host_wall_us. */
const std::vector<std::string>& timed_figures();

/** The raw samples of timing.<figure> (microseconds); empty when the report has none. */
std::vector<double> figure_samples(const nlohmann::ordered_json& report, const std::string& figure);

/** correctness.worst_rel_err, NaN when null (a NaN/Inf output) or absent. */
double worst_rel_err(const nlohmann::ordered_json& report);

/** correctness.gate, NaN when absent. */
double report_gate(const nlohmann::ordered_json& report);

/** device.name, or "" when the report has no device section. */
std::string device_name(const nlohmann::ordered_json& report);

/** report["solution"]["name"], else the file name of solution.path, else "?". */
std::string solution_name(const nlohmann::ordered_json& report);

/**
 * The summary `nibble grade` prints at its end, rebuilt from the report alone: task/config/GPU,
 * solution, disposition and reason, worst error per seed against the gate, GPU span median with
 * quartiles, host wall time and kernels per step, and the roofline line. `report_path`, when not
 * empty, is printed on the last line with the grade's total wall time.
 */
std::string format_summary(const nlohmann::ordered_json& report, const std::string& report_path);

/** format_summary without the report path line's path (the line keeps the grade's wall time). */
std::string format_summary(const nlohmann::ordered_json& report);

/** printf("%.*g", prec, v): the number format the grade's summary uses. */
std::string fmt_g(double v, int prec = 3);

}  // namespace nibble
