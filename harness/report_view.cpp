// report_view.cpp: read a `nibble grade` report of schema 1.x or 2.x into a ReportView, check it,
// and print its summary (see report_view.h).
#include "harness/report_view.h"

#include <algorithm>
#include <regex>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/stats.h"
#include "harness/task.h"
#include "harness/verdict.h"

namespace nibble {

using json = nlohmann::ordered_json;

std::string fmt_g(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

const std::vector<std::string>& timed_figures() {
  static const std::vector<std::string> f = {"gpu_span_us", "host_wall_us", "grader_clock_us"};
  return f;
}

const FigureView& timed_figure(const ReportView& report, const std::string& figure) {
  return figure == "host_wall_us" ? report.host_wall_us : figure == "grader_clock_us" ? report.grader_clock_us : report.gpu_span_us;
}

const FigureView& graded_time(const ReportView& report) {
  return report.clock == "wall" ? report.grader_clock_us : report.gpu_span_us;
}

std::string graded_time_label(const ReportView& report) {
  return report.clock == "wall" ? "median on the grader's clock" : "median GPU span";
}

namespace {

/** figure_problem for one figure `f` (graded: the graded time, which must have samples). */
std::string one_figure_problem(const ReportView& r, const FigureView& f, bool graded) {
  if (!f.present) return "";
  if (f.samples.empty())
    return graded && r.disposition == "Passed" ? "its median has no samples beside it: an edited report" : "";
  // n counts the samples the median was taken over: all of them, or fewer where throttled rounds
  // were left out of it (the samples keep every round).
  if (f.n >= 0 && (r.throttled_rounds_excluded ? size_t(f.n) > f.samples.size() : size_t(f.n) != f.samples.size()))
    return "its n (" + std::to_string(f.n) + ") does not fit the count of its samples (" + std::to_string(f.samples.size()) +
           "): an edited report";
  const auto [lo, hi] = std::minmax_element(f.samples.begin(), f.samples.end());
  // The grader makes a time below the theoretical bandwidth floor InvalidTiming: a Passed report's
  // graded samples are at or above it.
  if (graded && r.disposition == "Passed" && r.floor_theoretical_bw_us > 0 && *lo < r.floor_theoretical_bw_us * (1 - 1e-6))
    return "its fastest sample (" + fmt_g(*lo, 5) + " us) is below the theoretical bandwidth floor (" +
           fmt_g(r.floor_theoretical_bw_us, 5) + " us), which the grader calls no measurement: an edited report";
  // The tolerance is the medians' own scale: one of the largest sample's let a single huge sample
  // carry any median (a red-team's 1e11 us sample under a median of 3 us).
  const double own = summarize(f.samples).median, tol = 1e-9 * std::max(std::fabs(own), std::fabs(f.median));
  const bool in_range = f.median >= *lo - tol && f.median <= *hi + tol && !(f.q1 > f.median + tol) && !(f.median > f.q3 + tol);
  if (in_range && (r.throttled_rounds_excluded || std::fabs(f.median - own) <= tol)) return "";
  // Said as what is wrong: a median equal to the samples' but outside its own q1..q3 (a newcomer's
  // edit of every sample and the median, the quartiles left) read "1e+308 is not 1e+308".
  if (!in_range && std::fabs(f.median - own) <= tol)
    return "its median (" + fmt_g(f.median, 5) + " us) is outside its own q1 - q3 (" + fmt_g(f.q1, 5) + " - " + fmt_g(f.q3, 5) +
           " us) or its samples' range: an edited report";
  return "its median (" + fmt_g(f.median, 5) + " us) is not its " + std::to_string(f.samples.size()) + " samples' (" +
         fmt_g(own, 5) + " us): an edited report";
}

}  // namespace

std::string figure_graph_records(const ReportView& r) {
  if (r.graph_launches_audited == 0) return "";
  if (r.graph_launches_audited < 0 && r.graph_records == "graphs" && r.graph_launches_per_call.present &&
      r.graph_launches_per_call.max == 0)
    return "";
  return r.graph_records;
}

std::string figure_problem(const ReportView& r) {
  // The graded time first (its message says "its"), then every other timed figure with samples:
  // `report show` prints the host wall time's median too (a newcomer's edit of it to 1 us passed).
  const FigureView& graded = graded_time(r);
  if (std::string p = one_figure_problem(r, graded, true); !p.empty()) return p;
  for (const std::string& name : timed_figures()) {
    const FigureView& f = timed_figure(r, name);
    if (&f == &graded) continue;
    if (std::string p = one_figure_problem(r, f, false); !p.empty()) return "timing." + name + ": " + p;
  }
  return "";
}

std::string one_line(std::string s) {
  // UTF-8 first (a file name's bytes; a page declares UTF-8), then each control character a space:
  // C0 and DEL, and the C1 controls as UTF-8 (U+0080..U+009F: C2 80..C2 9F; U+009B is a terminal's CSI).
  s = utf8_text(s);
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch == 0x7f) {
      o += ' ';
    } else if (ch == 0xC2 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0x80) {
      o += ' ';
      ++i;
    } else {
      o += s[i];
    }
  }
  return o;
}

std::string sample_noun(const std::string& unit) {
  if (unit == "token") return "step";
  return unit.empty() ? "sample" : unit;
}

namespace {

/** A value of the report as the user wrote it, for a message. */
std::string shown(const json& v) { return json_text(v); }

const json& none() {
  static const json n;
  return n;
}

/** o[k], or null when o is not an object or has no k. */
const json& field(const json& o, const char* k) { return o.is_object() && o.contains(k) ? o[k] : none(); }

/** The first of `keys` that o has (version 1 named a figure after its task's unit). */
const json& first_of(const json& o, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (o.is_object() && o.contains(k)) return o[k];
  return none();
}

double num(const json& v) { return v.is_number() ? v.get<double>() : NAN; }
std::string str(const json& v, const std::string& dflt = "") { return v.is_string() ? one_line(v.get<std::string>()) : dflt; }
/** A value for display: a string as it is, anything else as JSON, "?" when absent. */
std::string text(const json& v) { return v.is_null() ? "?" : v.is_string() ? one_line(v.get<std::string>()) : shown(v); }

int schema_major_of(const json& r) {
  const json& v = field(r, "schema_version");
  return v.is_string() && v.get<std::string>().rfind("2.", 0) == 0 ? 2 : 1;
}

/** The minor of a version 2 report's schema_version ("2.4.0" -> 4); -1 for version 1 or unreadable
 *  (check_report refuses a malformed version). */
int schema_minor_of(const json& r) {
  if (schema_major_of(r) != 2) return -1;
  const std::string v = field(r, "schema_version").get<std::string>();
  const size_t dot = v.find('.', 2);
  try {
    return std::stoi(v.substr(2, dot == std::string::npos ? std::string::npos : dot - 2));
  } catch (const std::exception&) {
    return -1;
  }
}

/** The floors a report's own figures give, as grade.cpp takes them (us; NaN where a figure is
 *  missing): its bytes over the device's theoretical and measured copy bandwidth, and the device's
 *  weight-read kernel's median. */
struct DeviceFloors {
  double theoretical_bw_us, measured_copy_bw_us, weight_read_us;
};
DeviceFloors device_floors(const json& r) {
  const json &t = field(r, "timing"), &dev = field(r, "device");
  const json& bytes = first_of(t, {"bytes_per_call", "bytes_per_step"});
  const auto over = [&](double bandwidth) { return bytes.is_number() && bandwidth > 0 ? num(bytes) / bandwidth * 1e6 : NAN; };
  return {over(num(field(dev, "theoretical_bandwidth_Bps"))), over(num(field(field(dev, "copy_bandwidth"), "median_Bps"))),
          num(field(field(dev, "read_floor"), "median_us"))};
}

void check_report(const json& r, const std::string& what) {
  if (!r.is_object()) throw BadReport(what + ": not a nibble report (the top level is not a JSON object)");
  if (!r.contains("schema") || !r["schema"].is_string())
    throw BadReport(what + ": not a nibble report (no \"schema\" field)");
  if (r["schema"] != "nibble.report")
    throw BadReport(what + ": not a nibble report (schema is " + shown(r["schema"]) + ", expected \"nibble.report\")");
  // Reports of another major schema version may mean other things by the same keys.
  if (r.contains("schema_version")) {
    const json& v = r["schema_version"];
    if (!v.is_string())
      throw BadReport(what + ": malformed nibble report: schema_version " + shown(v) + " is a JSON " + v.type_name() +
                      "; nibble writes it as a string, e.g. \"2.4.0\"");
    // MAJOR.MINOR.PATCH as nibble writes it ("2.4.0"), of a major it reads.
    const std::string s = v.get<std::string>();
    static const std::regex version(R"([12]\.[0-9]+\.[0-9]+)");
    if (!std::regex_match(s, version))
      throw BadReport(what + ": schema_version " + shown(v) +
                      " is not one this nibble reads (1.x or 2.x); use the nibble that wrote it");
  }
  for (const char* k : {"task", "config", "disposition"})
    if (!r.contains(k) || !r[k].is_string())
      throw BadReport(what + ": malformed nibble report: \"" + k + "\" is missing or not a string");
  if (r["task"].get<std::string>().empty()) throw BadReport(what + ": malformed nibble report: \"task\" is empty");
  if (!r.contains("correctness") || !r["correctness"].is_object())
    throw BadReport(what + ": malformed nibble report: \"correctness\" is missing or not an object");
  // A Passed grade states the error it passed with (every report nibble writes does): without it,
  // compare would call the report a correctness regression (exit 2) rather than bad input.
  if (r["disposition"] == "Passed" && !std::isfinite(num(field(r["correctness"], "worst_rel_err"))))
    throw BadReport(what + ": malformed nibble report: disposition Passed without a finite correctness.worst_rel_err");
  // A disposition judge() gives (or a grader failure's), and a Passed one within its own gate: a
  // report edited to say otherwise would be ranked and shown as what it is not.
  const std::string d = r["disposition"];
  if (!disposition_from_string(d) && d != kGraderFailedDisposition)
    throw BadReport(what + ": malformed nibble report: disposition \"" + d + "\" is none nibble gives");
  const json& c = r["correctness"];
  const double worst = num(field(c, "worst_rel_err")), gate = num(field(c, "gate"));
  // Errors are norms' ratios: never below 0 (-1 would rank as better than exact).
  for (const char* k : {"worst_rel_err", "worst_elem_err"})
    if (num(field(c, k)) < 0)
      throw BadReport(what + ": malformed nibble report: correctness." + k + " is " + shown(field(c, k)) + ", below 0");
  // A Passed grade was judged against a gate: one it states, a positive number; for a task and config
  // this nibble knows, the task's own (a report with its gate edited up, or removed, would be
  // ranked as passing an error the task fails).
  if (d == "Passed" && !(gate > 0 && std::isfinite(gate)))
    throw BadReport(what + ": malformed nibble report: disposition Passed without a positive correctness.gate (it is " +
                    shown(field(c, "gate")) + ")");
  if (d == "Passed" && !(worst < gate))
    throw BadReport(what + ": malformed nibble report: disposition Passed with correctness.worst_rel_err " + fmt_g(worst) +
                    " at or past its own gate " + fmt_g(gate) + " (judge() calls that Incorrect)");
  const Task* task = task_or_null(r["task"].get<std::string>());
  const double guard = num(field(c, "element_guard")), worst_elem = num(field(c, "worst_elem_err"));
  if (task && d == "Passed") {
    std::optional<double> task_gate, task_guard;
    try {
      task->check_config(r["config"].get<std::string>());
      task_gate = task->gate(r["config"]);
      task_guard = task->element_guard(r["config"]);
    } catch (const std::exception&) {  // a config this nibble does not know (another version's): its own gate stands
    }
    if (task_gate && std::abs(gate - *task_gate) > 1e-9 * *task_gate)
      throw BadReport(what + ": malformed nibble report: correctness.gate " + fmt_g(gate) + " is not " + task->name() + "'s gate " +
                      fmt_g(*task_gate) + " for config " + r["config"].get<std::string>() + "; grade it again");
    // The per-element guard is the task's, and a report of schema 2.2 or later states it (every one
    // committed does; 2.0 and 2.1 wrote null where a task had none yet): one deleted, nulled or a
    // string left any element error unchecked (a red-team's finding).
    if (task_guard && std::isfinite(*task_guard) && schema_minor_of(r) >= 2 && !field(c, "element_guard").is_number())
      throw BadReport(what + ": malformed nibble report: disposition Passed with correctness.element_guard " +
                      shown(field(c, "element_guard")) + ", but " + task->name() + " guards each element at " +
                      fmt_g(*task_guard) + "; grade it again");
    if (task_guard && std::isfinite(guard) && std::abs(guard - *task_guard) > 1e-9 * *task_guard)
      throw BadReport(what + ": malformed nibble report: correctness.element_guard " + fmt_g(guard) + " is not " + task->name() +
                      "'s " + fmt_g(*task_guard) + "; grade it again");
  }
  // The worst errors are the worst of every seed's, call's and output's (grade.cpp takes them so):
  // one past them, or a seed's null (a NaN/Inf output) under a Passed grade, is an edited report
  // whose headline was kept under the gate.
  if (std::isfinite(worst))
    for (const json& seed : field(c, "per_seed")) {
      auto past = [&](const json& v, const char* limit_key, const std::string& where) {
        const double limit = num(field(c, limit_key));
        if (v.is_number() && std::isfinite(limit) && num(v) > limit * (1 + 1e-12))
          throw BadReport(what + ": malformed nibble report: " + where + " " + shown(v) + " is past correctness." + limit_key +
                          " " + fmt_g(limit) + ", which is the worst of them all; grade it again");
      };
      const std::string at = "correctness.per_seed[seed " + shown(field(seed, "seed")) + "]";
      const json& sw = field(seed, "worst_rel_err");
      if (d == "Passed" && seed.is_object() && seed.contains("worst_rel_err") && sw.is_null())
        throw BadReport(what + ": malformed nibble report: disposition Passed with " + at +
                        ".worst_rel_err null (a NaN or Inf output: judge() calls that Incorrect)");
      past(sw, "worst_rel_err", at + ".worst_rel_err");
      for (const char* list : {"calls", "steps"})
        for (const json& call : field(seed, list)) {
          const std::string where = at + "." + list + "[" + shown(field(call, "call")) + "]";
          past(field(call, "rel_err"), "worst_rel_err", where + ".rel_err");
          const json& outs = field(call, "outputs");
          if (outs.is_object())
            for (auto o = outs.begin(); o != outs.end(); ++o) {
              const std::string out = where + ".outputs[" + shown(json(o.key())) + "]";
              past(field(o.value(), "rel_err"), "worst_rel_err", out + ".rel_err");
              past(field(o.value(), "elem_err"), "worst_elem_err", out + ".elem_err");
            }
        }
    }
  if (d == "Passed" && std::isfinite(guard) && std::isfinite(worst_elem) && worst_elem > guard)
    throw BadReport(what + ": malformed nibble report: disposition Passed with correctness.worst_elem_err " + fmt_g(worst_elem) +
                    " past its element guard " + fmt_g(guard) + " (judge() calls that Incorrect)");
  // The solution graded is the binary the sandbox pinned (both hashes are of one file): another
  // solution's name and hash put over them ranked that solution by this one's time.
  const json &sol_hash = field(field(r, "solution"), "sha256"),
             &pinned = field(field(field(field(r, "sandbox"), "binaries"), "solution"), "sha256");
  if (sol_hash.is_string() && pinned.is_string() && sol_hash != pinned)
    throw BadReport(what + ": malformed nibble report: solution.sha256 " + shown(sol_hash) +
                    " is not the graded binary's, sandbox.binaries.solution.sha256 " + shown(pinned) + ": an edited report");
  // The device's figures the floors come from are its own: the theoretical bandwidth is its memory
  // clock x 2 (double data rate) x its bus width (child.cpp's probe_device), and the weight-read floor
  // the fastest of the probe's grids (a red-team's floors made 4x easier with the device's figures).
  const json& dev = field(r, "device");
  if (const json &khz = field(dev, "memory_clock_khz"), &bits = field(dev, "memory_bus_width_bits"),
      &peak = field(dev, "theoretical_bandwidth_Bps");
      khz.is_number() && bits.is_number() && peak.is_number() &&
      std::fabs(num(peak) - 2.0 * num(khz) * 1e3 * num(bits) / 8.0) > 1e-9 * num(peak))
    throw BadReport(what + ": malformed nibble report: device.theoretical_bandwidth_Bps " + shown(peak) +
                    " is not 2 x device.memory_clock_khz " + shown(khz) + " x device.memory_bus_width_bits " + shown(bits) +
                    " / 8: an edited report");
  if (const json& rf = field(dev, "read_floor"); field(rf, "median_us").is_number() && field(rf, "grids").is_array()) {
    double fastest = INFINITY;
    for (const json& g : rf["grids"]) fastest = std::min(fastest, num(field(g, "median_us")));
    if (std::isfinite(fastest) && std::fabs(num(rf["median_us"]) - fastest) > 1e-9 * fastest)
      throw BadReport(what + ": malformed nibble report: device.read_floor.median_us " + shown(rf["median_us"]) +
                      " is not the fastest of its grids' medians (" + fmt_g(fastest, 6) + " us): an edited report");
  }
  if (!r.contains("timing")) return;
  const json& t = r["timing"];
  if (!t.is_object()) throw BadReport(what + ": malformed nibble report: \"timing\" is not an object");
  if (schema_major_of(r) == 2 && field(t, "unit") != "token" && field(t, "unit") != "call")
    throw BadReport(what + ": malformed nibble report: timing.unit is " + shown(field(t, "unit")) +
                    ", not \"token\" or \"call\"");
  // A task this nibble knows times one kind of sample: a report of it in another unit was edited,
  // and would be ranked beside the task's others by a figure of another meaning.
  if (task && t.contains("unit") && t["unit"] != task->unit())
    throw BadReport(what + ": malformed nibble report: timing.unit is " + shown(t["unit"]) + ", but a sample of " +
                    task->name() + " is one " + task->unit() + " (nibble writes that unit for it); grade it again");
  // The grader's clock is recorded only when it is the graded figure (--clock wall): with it beside a
  // "span" clock, a wall grade was relabelled to rank by its shorter span (a red-team's finding).
  if (t.contains("grader_clock_us") && field(t, "clock") != "wall")
    throw BadReport(what + ": malformed nibble report: timing.grader_clock_us is there but timing.clock is " +
                    shown(field(t, "clock")) + ": nibble records that clock only as the graded one (\"wall\"); an edited report");
  // Whether the host wall time is noise is the task's (a regression in it then compares as none).
  if (task && schema_major_of(r) == 2 && t.contains("host_wall_informational") &&
      t["host_wall_informational"] != task->host_wall_informational())
    throw BadReport(what + ": malformed nibble report: timing.host_wall_informational is " + shown(t["host_wall_informational"]) +
                    ", but " + task->name() + "'s is " + (task->host_wall_informational() ? "true" : "false") +
                    ": an edited report");
  // The modes a figure was taken in: either of the values nibble writes, or absent (an older report:
  // "span", "nodes"); anything else would be ranked, compared and printed as a third mode.
  for (const auto& [key, a, b] : {std::tuple<const char*, const char*, const char*>{"clock", "span", "wall"},
                                  {"graph_records", "nodes", "graphs"}})
    if (t.contains(key) && t[key] != a && t[key] != b)
      throw BadReport(what + ": malformed nibble report: timing." + key + " is " + shown(t[key]) + ", not \"" + a +
                      "\" or \"" + b + "\"");
  // A count, where given: a negative or fractional one would be read as "absent" and the report set
  // beside the other record mode's by a figure it does not have.
  if (t.contains("graph_launches_audited") &&
      !(t["graph_launches_audited"].is_number_integer() && t["graph_launches_audited"].get<long long>() >= 0))
    throw BadReport(what + ": malformed nibble report: timing.graph_launches_audited is " +
                    shown(t["graph_launches_audited"]) + ", not a count of launches");
  for (const std::string& f : timed_figures()) {
    if (!t.contains(f)) continue;
    const json& s = t[f];
    if (!s.is_object() || !s.contains("samples") || !s["samples"].is_array())
      throw BadReport(what + ": malformed nibble report: timing." + f + " has no \"samples\" array");
    for (const json& v : s["samples"])
      if (!(num(v) > 0) || !std::isfinite(num(v)))
        throw BadReport(what + ": malformed nibble report: timing." + f + ".samples holds " + shown(v) + ", not a positive time");
    // n, where given, is a count (a string or a fraction would be skipped by the check of n against
    // the samples: a newcomer's "96" passed).
    if (s.contains("n") && !(s["n"].is_number_integer() && s["n"].get<long long>() >= 0))
      throw BadReport(what + ": malformed nibble report: timing." + f + ".n is " + shown(s["n"]) + ", not a count of samples");
  }
  // The headline time is the graded figure's median, and the throughput figures follow from it
  // (grade.cpp writes them so): `report show` prints them as they stand (a newcomer's us_per_call
  // of 1, and samples of 1e308 under an unchanged TFLOP/s, were shown as read).
  const json& per_call = first_of(t, {"us_per_call", "us_per_token"});
  const json& graded = field(field(t, field(t, "clock") == "wall" ? "grader_clock_us" : "gpu_span_us"), "median");
  const double us = num(per_call);
  auto differs = [](double a, double b, double rel) { return !(std::fabs(a - b) <= rel * std::fabs(b)); };
  if (per_call.is_number() && graded.is_number() && differs(us, num(graded), 1e-9))
    throw BadReport(what + ": malformed nibble report: timing.us_per_call " + shown(per_call) +
                    " is not the graded figure's median " + shown(graded) + ": an edited report");
  // Each throughput, the amount it is of (and that amount's version 1 name), the factor from per us.
  for (const auto& [key, amount, v1_amount, scale] :
       {std::tuple<const char*, const char*, const char*, double>{"tflops", "flops_per_call", "flops_per_call", 1e-6},
        {"achieved_bandwidth_Bps", "bytes_per_call", "bytes_per_step", 1e6}})
    if (const json &v = field(t, key), &a = first_of(t, {amount, v1_amount});
        v.is_number() && a.is_number() && us > 0 && differs(num(v), num(a) / us * scale, 1e-6))
      throw BadReport(what + ": malformed nibble report: timing." + key + " " + shown(v) + " does not follow from timing." + amount +
                      " " + shown(a) + " over timing.us_per_call " + shown(per_call) + ": an edited report");
  // The checks above hold only where their figures are numbers: a graded report without its headline,
  // or one with a throughput, amount or fraction that is not a number (or a throughput without its
  // amount), was shown, compared and ranked as read (a newcomer's report with us_per_call deleted
  // and TFLOP/s set to 99). grade.cpp writes each as a number or not at all.
  const bool graded_figure = field(field(t, "gpu_span_us"), "samples").is_array();
  if (graded_figure && !per_call.is_number())
    throw BadReport(what + ": malformed nibble report: timing.us_per_call is " + shown(per_call) +
                    ", but the report has graded samples (timing.gpu_span_us): nibble writes their median there");
  for (const char* key : {"us_per_call", "us_per_token", "tflops", "achieved_bandwidth_Bps", "flops_per_call", "bytes_per_call",
                          "bytes_per_step", "fraction_of_theoretical_bw", "fraction_of_measured_bw", "fraction_of_weight_read_floor"})
    if (t.contains(key) && !(t[key].is_number() && std::isfinite(num(t[key]))))
      throw BadReport(what + ": malformed nibble report: timing." + key + " is " + shown(t[key]) + ", not a number");
  for (const auto& [key, amount, v1_amount] : {std::tuple<const char*, const char*, const char*>{"tflops", "flops_per_call", "flops_per_call"},
                                               {"achieved_bandwidth_Bps", "bytes_per_call", "bytes_per_step"}})
    if (t.contains(key) && (!first_of(t, {amount, v1_amount}).is_number() || !per_call.is_number()))
      throw BadReport(what + ": malformed nibble report: timing." + key + " without timing." + amount +
                      " and timing.us_per_call, which it follows from: an edited report");
  // Each fraction of a floor is that floor over the headline time, and each floor the device's own
  // figure: the bytes over its bandwidth, or the weight-read kernel's median (grade.cpp). A fraction
  // edited alone, or with its floor, was printed as read (`report show`'s "-> 99% of it" beside the
  // leaderboard's 39%).
  const std::string bytes = (t.contains("bytes_per_call") ? "timing.bytes_per_call " : "timing.bytes_per_step ") +
                            shown(first_of(t, {"bytes_per_call", "bytes_per_step"}));
  const DeviceFloors expect = device_floors(r);
  const bool v2_floors = schema_major_of(r) == 2;
  // Each fraction, its floor (version 2: timing.floors.<key>; version 1: timing.<key>), what that
  // floor should be and where it comes from.
  for (const auto& [fraction, floor_key, v1_key, expected, source] :
       {std::tuple<const char*, const char*, const char*, double, std::string>{
            "fraction_of_theoretical_bw", "theoretical_bw_us", "floor_us_theoretical_bw", expect.theoretical_bw_us,
            bytes + " over device.theoretical_bandwidth_Bps"},
        {"fraction_of_measured_bw", "measured_copy_bw_us", "floor_us_measured_copy_bw", expect.measured_copy_bw_us,
         bytes + " over device.copy_bandwidth.median_Bps"},
        {"fraction_of_weight_read_floor", "weight_read_us", "floor_us_weight_read", expect.weight_read_us,
         "device.read_floor.median_us"}}) {
    const json& floor = v2_floors ? field(field(t, "floors"), floor_key) : field(t, v1_key);
    const std::string floor_name = v2_floors ? std::string("floors.") + floor_key : v1_key;
    if (floor.is_number() && !std::isnan(expected) && differs(num(floor), expected, 1e-6))
      throw BadReport(what + ": malformed nibble report: timing." + floor_name + " " + shown(floor) + " is not " + source +
                      " (" + fmt_g(expected, 6) + " us): an edited report");
    // A version 1 report has no floors: its fractions follow from the device's figures alone.
    const double floor_us = floor.is_number() ? num(floor) : expected;
    if (t.contains(fraction) && !std::isnan(floor_us) && us > 0 && differs(num(t[fraction]), floor_us / us, 1e-6))
      throw BadReport(what + ": malformed nibble report: timing." + fraction + " " + shown(t[fraction]) + " is not its floor " +
                      fmt_g(floor_us, 6) + " us over timing.us_per_call " + shown(per_call) + ": an edited report");
  }
}

FigureView figure_of(const json& s) {
  FigureView f;
  if (!s.is_object()) return f;
  f.present = true;
  for (const auto& [k, m] : {std::pair{"median", &FigureView::median}, {"q1", &FigureView::q1}, {"q3", &FigureView::q3},
                             {"min", &FigureView::min}, {"max", &FigureView::max}, {"mean", &FigureView::mean},
                             {"stdev", &FigureView::stdev}})
    f.*m = num(field(s, k));
  if (field(s, "n").is_number_integer()) f.n = field(s, "n").get<long long>();
  for (const json& v : field(s, "samples"))
    if (v.is_number()) f.samples.push_back(v.get<double>());
  return f;
}

/** Version 1 wrote no unit: its keys say what a sample was (the decode pipeline counted steps and
 *  tokens, the GEMM pipeline calls). */
std::string v1_unit(const json& r) {
  const json& t = field(r, "timing");
  for (const char* k : {"us_per_token", "kernels_per_step", "bytes_per_step"})
    if (t.is_object() && t.contains(k)) return "token";
  for (const char* k : {"us_per_call", "kernels_per_call", "bytes_per_call"})
    if (t.is_object() && t.contains(k)) return "call";
  const json& c = field(r, "correctness");
  if (c.contains("checked_steps")) return "token";
  const json& seeds = field(c, "per_seed");
  if (seeds.is_array() && !seeds.empty() && field(seeds[0], "calls").is_array()) return "call";
  return "";
}

void read_provenance(const json& r, ReportView& v) {
  v.created_utc = str(field(r, "created_utc"));
  v.nibble_version = str(field(r, "nibble_version"));
  const json& sol = field(r, "solution");
  v.solution_path = str(field(sol, "path"));
  v.solution_sha256 = str(field(sol, "sha256"));
  v.solution_name = str(field(sol, "name"));
  if (v.solution_name.empty())
    v.solution_name = v.solution_path.empty() ? "?" : std::filesystem::path(v.solution_path).filename().string();
  const json& facts = field(sol, "facts");
  if (facts.is_object())
    for (auto it = facts.begin(); it != facts.end(); ++it)
      if (it.value().is_primitive()) v.solution_facts.push_back(it.key() + " " + text(it.value()));
  const json& ref = field(r, "reference");
  v.reference_name = str(field(ref, "name"), "?");
  v.reference_numerics = str(field(ref, "numerics"));
  const json& d = field(r, "device");
  v.device_name = str(field(d, "name"));
  v.device_compute_capability = text(field(d, "compute_capability"));
  v.device_sms = text(field(d, "sms"));
  v.device_driver = text(field(d, "driver_version"));
  v.theoretical_bandwidth_Bps = num(field(d, "theoretical_bandwidth_Bps"));
  v.copy_bandwidth_Bps = num(field(field(d, "copy_bandwidth"), "median_Bps"));
  for (const json& f : field(r, "fixtures"))
    if (f.is_object()) v.fixtures.push_back({text(field(f, "seed")), str(field(f, "file_sha256"))});
  const json& g = field(r, "git");
  if (field(g, "commit").is_string()) v.git_commit = one_line(g["commit"].get<std::string>());
  v.git_dirty = field(g, "dirty").is_boolean() && g["dirty"].get<bool>();
  v.git_commit_from = str(field(g, "commit_from"));
  const json& h = field(r, "host");
  if (h.is_object()) v.host_json = shown(h);
  v.host_name = str(field(h, "hostname"));
  if (field(h, "cpus").is_number_integer()) v.host_cpus = h["cpus"].get<int>();
  for (const json& a : field(r, "argv")) v.argv.push_back(a.is_string() ? one_line(a.get<std::string>()) : shown(a));
  v.wall_seconds_total = num(field(field(r, "wall_seconds"), "total"));
  const json& sb = field(r, "sandbox");
  v.sandbox_required = field(sb, "required").is_boolean() && sb["required"].get<bool>();
  for (const json& l : field(sb, "layers"))
    if (l.is_object()) v.sandbox_layers.push_back({str(field(l, "name"), "?"), str(field(l, "state"), "?"), str(field(l, "detail"))});
}

void read_calibration(const json& r, CalibrationView& cv) {
  // report html --calibration puts a whole table at the top level; the grade records its summary.
  const json& c = field(r, "calibration").is_object() ? r["calibration"] : field(field(r, "correctness"), "calibration");
  if (!c.is_object()) return;
  cv.present = true;
  for (const json& row : field(c, "rows"))
    if (field(row, "worst").is_number())
      cv.rows.push_back({str(field(row, "variant"), "?"), row["worst"].get<double>(), field(row, "expected") == "PASS"});
  cv.legitimate_variants_worst = num(field(c, "legitimate_variants_worst"));
  // No must-fail row leaves +inf, which JSON stores as null.
  const json& dropped = field(c, "dropped_feature_variants_best");
  if (dropped.is_number()) cv.dropped_feature_variants_best = dropped.get<double>();
  const json& d = field(c, "device");
  cv.device = d.is_string() ? one_line(d.get<std::string>()) : str(field(d, "name"));
  cv.source = str(field(c, "source"));
  cv.created_utc = str(field(c, "created_utc"));
}

void read_correctness(const json& r, ReportView& v) {
  const json& c = field(r, "correctness");
  v.gate = num(field(c, "gate"));
  v.element_guard = num(field(c, "element_guard"));
  v.metric = str(field(c, "metric"));
  v.worst_rel_err_recorded = c.contains("worst_rel_err");
  v.worst_rel_err = num(field(c, "worst_rel_err"));
  v.ratio_to_gate = num(field(c, "ratio_to_gate"));
  if (v.schema_major == 2) {
    for (const auto& [name, e] : field(c, "worst_by_output").items()) v.worst_by_output.push_back({name, num(e)});
  } else {
    if (c.contains("worst_logits_rel_err")) v.worst_by_output.push_back({"logits", num(c["worst_logits_rel_err"])});
    if (c.contains("worst_kv_appended_rel_err")) v.worst_by_output.push_back({"kv_appended", num(c["worst_kv_appended_rel_err"])});
  }
  for (const json& s : field(c, "per_seed")) {
    if (!s.is_object() || !s.contains("worst_rel_err")) continue;
    SeedErrorView e;
    if (field(s, "seed").is_number_unsigned()) e.seed = s["seed"].get<uint64_t>();
    e.worst_rel_err = num(s["worst_rel_err"]);
    // Calls per seed (version 1's GEMM kept the timed call apart); version 1's decode counted its
    // steps once for every seed.
    if (field(s, "calls").is_array() || field(s, "timed_call").is_array())
      e.checked = (long long)(field(s, "calls").size() + field(s, "timed_call").size());
    else if (field(c, "checked_steps").is_number_integer())
      e.checked = c["checked_steps"].get<long long>();
    v.per_seed.push_back(e);
  }
  read_calibration(r, v.calibration);
}

/** timing's protocol in one line: what is timed, what happens before each call and between calls. */
std::string protocol_line(const json& p) {
  if (p.is_string()) return one_line(p.get<std::string>());
  std::string s = str(field(p, "metric")) + "; " + str(field(p, "before_each_call"));
  if (p.is_object() && p.contains("between_calls")) s += "; " + str(p["between_calls"]);
  return p.is_object() ? s : "";
}

void read_timing(const json& r, ReportView& v) {
  const json& t = field(r, "timing");
  v.timed = t.is_object();
  const bool v2 = v.schema_major == 2;
  v.unit = v2 ? str(field(t, "unit")) : v1_unit(r);
  if (!v.timed) return;
  v.us_per_call = num(first_of(t, {"us_per_call", "us_per_token"}));
  v.gpu_span_us = figure_of(field(t, "gpu_span_us"));
  if (const json& c = field(t, "clock"); c.is_string()) v.clock = c.get<std::string>();
  if (const json& g = field(t, "graph_records"); g.is_string()) v.graph_records = g.get<std::string>();
  v.graph_launches_per_call = figure_of(field(t, "graph_launches_per_call"));
  if (const json& g = field(t, "graph_launches_audited"); g.is_number_integer()) v.graph_launches_audited = g.get<long long>();
  // Only where rounds were throttled: the flag alone (edited in) would relax the median's check.
  const json& clocks = field(field(t, "ledger"), "clocks");
  v.throttled_rounds_excluded = field(clocks, "throttled_rounds_excluded_from_median") == true &&
                                field(clocks, "throttled_rounds").is_array() && !field(clocks, "throttled_rounds").empty();
  v.grader_clock_us = figure_of(field(t, "grader_clock_us"));
  v.host_wall_us = figure_of(field(t, "host_wall_us"));
  v.busy_us = figure_of(field(t, "busy_us"));
  v.kernels_per_call = figure_of(first_of(t, {"kernels_per_call", "kernels_per_step"}));
  v.bytes_per_call = num(first_of(t, {"bytes_per_call", "bytes_per_step"}));
  v.bytes_note = str(first_of(t, {"bytes_note", "bytes_per_step_note"}));
  // The figures both versions name alike.
  for (const auto& [k, m] :
       {std::pair{"flops_per_call", &ReportView::flops_per_call}, {"tflops", &ReportView::tflops},
        {"achieved_bandwidth_Bps", &ReportView::achieved_bandwidth_Bps}, {"rounds", &ReportView::rounds},
        {"invalid_samples", &ReportView::invalid_samples}, {"nonfinite_outputs", &ReportView::nonfinite_outputs},
        {"late_kernels", &ReportView::late_kernels}})
    v.*m = num(field(t, k));
  v.gaps_with_foreign_work = num(first_of(t, {"gaps_with_foreign_work", "gaps_with_foreign_kernels"}));
  v.harness_records_per_gap = num(first_of(t, {"harness_records_per_gap", "harness_kernels_per_gap"}));
  v.foreign_work = str(field(t, "foreign_work"));
  const json& fl = field(t, "floors");
  v.floor_theoretical_bw_us = num(v2 ? field(fl, "theoretical_bw_us") : field(t, "floor_us_theoretical_bw"));
  v.floor_measured_copy_bw_us = num(v2 ? field(fl, "measured_copy_bw_us") : field(t, "floor_us_measured_copy_bw"));
  // A report without its floors still has its bytes and its device's bandwidths, which are what the
  // floors are (grade.cpp): the floor check of a Passed grade's samples then holds without them (a
  // red-team's report with floors and fractions deleted, or relabelled version 1, ranked at 0.1x).
  if (v.bytes_per_call > 0) {
    const DeviceFloors from_device = device_floors(r);
    if (std::isnan(v.floor_theoretical_bw_us)) v.floor_theoretical_bw_us = from_device.theoretical_bw_us;
    if (std::isnan(v.floor_measured_copy_bw_us)) v.floor_measured_copy_bw_us = from_device.measured_copy_bw_us;
  }
  const double wr = num(v2 ? field(fl, "weight_read_us") : field(t, "floor_us_weight_read"));
  v.floor_weight_read_us = std::isfinite(wr) && wr > 0 ? wr : NAN;
  // Version 1's GEMM reports kept no fractions: the floor over the median is what they mean.
  v.fraction_of_measured_bw = num(field(t, "fraction_of_measured_bw"));
  if (std::isnan(v.fraction_of_measured_bw)) v.fraction_of_measured_bw = v.floor_measured_copy_bw_us / v.gpu_span_us.median;
  v.fraction_of_theoretical_bw = num(field(t, "fraction_of_theoretical_bw"));
  if (std::isnan(v.fraction_of_theoretical_bw)) v.fraction_of_theoretical_bw = v.floor_theoretical_bw_us / v.gpu_span_us.median;
  // Version 1's GEMM pipeline (the one that counted calls) judged its host wall time as noise.
  v.host_wall_informational = v2 ? field(t, "host_wall_informational") == true : v.unit == "call";
  v.timing_protocol = protocol_line(v2 ? field(field(r, "protocol"), "timing") : field(t, "protocol"));
  v.calls_per_round = num(first_of(t, {"calls_per_round", "steps_per_round"}));
  v.stop_reason = field(t, "stop_reason").is_null() ? "" : text(t["stop_reason"]);
  v.invalid_reason = str(field(t, "invalid_reason"));
  for (const json& c : field(t, "verified_calls")) {
    if (v2)
      v.verified_calls.push_back({text(field(c, "call")), num(field(c, "rel_err"))});
    else  // the decode pipeline's: {step, pos, logits_rel_err}
      v.verified_calls.push_back({"step " + text(field(c, "step")), num(field(c, "logits_rel_err"))});
  }
  v.timing_seed_from = str(v2 ? field(t, "timing_seed_from") : first_of(t, {"token_seed_from", "flip_seed_from"}));
  for (const json& p : v2 ? field(field(t, "task_figures"), "positions") : field(t, "positions"))
    v.positions.push_back(num(p));
}

}  // namespace

ReportView graded_report_view(const json& r) {
  ReportView v;
  v.schema_major = schema_major_of(r);
  v.schema_version = str(field(r, "schema_version"));
  v.task = str(field(r, "task"));
  v.config = str(field(r, "config"));
  v.disposition = str(field(r, "disposition"));
  v.reason = str(field(r, "reason"));
  v.rule = str(field(r, "rule"));
  read_provenance(r, v);
  read_correctness(r, v);
  read_timing(r, v);
  return v;
}

ReportView read_report_view(const json& report, const std::string& what) {
  check_report(report, what);
  return graded_report_view(report);
}

void validate_report(const json& report, const std::string& what) { check_report(report, what); }

json load_report(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw BadReport(path + ": no such file");
  if (fs::is_directory(path, ec)) throw BadReport(path + ": is a folder, not a report file");
  std::string text;
  try {
    text = read_file(path);  // a regular file of bounded size: a pipe or /dev/zero would never end
  } catch (const std::exception& e) {
    throw BadReport(e.what());
  }
  json r;
  try {  // depth-bounded: printing a 100,000-deep value in an error message overflowed the stack
    r = parse_ordered_json_bounded(text, path, kReportJsonDepth);
  } catch (const std::exception& e) {  // parse errors, numbers a double cannot hold (1e999), depth, a key twice
    throw BadReport(e.what());
  }
  check_report(r, path);
  return r;
}

ReportView load_report_view(const std::string& path) { return graded_report_view(load_report(path)); }  // checked once

namespace {

/** The between-calls line: only when the grade saw GPU work outside the windows (the solution's
 *  in a gap, which makes the grade InvalidTiming, or late kernels, recorded only). */
void between_calls_line(std::ostream& o, const ReportView& r) {
  const double gaps = r.gaps_with_foreign_work, late = r.late_kernels;
  if (!(gaps > 0) && !(late > 0)) return;
  o << "  between      " << fmt_g(std::isnan(gaps) ? 0 : gaps, 6) << " gaps between timed calls held GPU work"
    << (r.foreign_work.empty() ? "" : " (" + r.foreign_work + ")") << " beyond the harness's own ("
    << fmt_g(r.harness_records_per_gap, 3) << " records per gap); " << fmt_g(std::isnan(late) ? 0 : late, 6)
    << " kernels reached the timer only after their window or gap was collected\n";
}

std::string count_or_unknown(long long n) { return n < 0 ? "?" : std::to_string(n); }

}  // namespace

// Mirrors the block "5. The summary a person reads" of the grade line for line; where the grade
// used its in-memory state (bytes per sample, copy bandwidth, worst error) this reads the same
// numbers from the fields the grade wrote them to. Which lines appear follows the figures the
// report has (FLOPs: a throughput line; a weight-read floor: its line), never the task's name.
namespace {

/** "  sandbox      all 7 layers in force (...)" or the layers that were not, with why. */
std::string sandbox_line(const ReportView& r) {
  std::string in, out;
  size_t applied = 0;
  for (const auto& l : r.sandbox_layers) {
    if (l.state == "applied") {
      in += (in.empty() ? "" : ", ") + l.name;
      ++applied;
    } else {
      out += "\n               " + l.name + ": " + l.state + (l.detail.empty() ? "" : ": " + l.detail);
    }
  }
  std::string s = "  sandbox      ";
  if (out.empty()) return s + "all " + std::to_string(applied) + " layers in force (" + in + ")\n";
  return s + std::to_string(applied) + " of " + std::to_string(r.sandbox_layers.size()) + " layers in force (" + in + "); not:" +
         out + "\n";
}

}  // namespace

std::string format_summary(const ReportView& r, const std::string& report_path) {
  const std::string noun = sample_noun(r.unit);
  std::ostringstream o;
  o << "\nnibble grade  " << r.task << " / " << r.config << "  on " << (r.device_name.empty() ? "?" : r.device_name) << "\n";
  o << "  solution     " << r.solution_name << "  (" << (r.solution_path.empty() ? "?" : r.solution_path) << ")";
  for (size_t i = 0; i < r.solution_facts.size(); ++i) o << (i ? ", " : "  ") << r.solution_facts[i];
  o << "\n";
  o << "  disposition  " << r.disposition << ": " << r.reason << "\n";
  // Where the drop-the-feature table puts the gate's neighbours.
  const CalibrationView& cal = r.calibration;
  if (cal.present && !std::isnan(cal.legitimate_variants_worst))
    o << "  calibration  legitimate precision variants reach " << fmt_g(cal.legitimate_variants_worst)
      << ", dropped features start at "
      << (std::isfinite(cal.dropped_feature_variants_best) ? fmt_g(cal.dropped_feature_variants_best) : std::string("inf"))
      << " (gate " << fmt_g(r.gate) << ")\n";
  if (!std::isnan(r.worst_rel_err))
    for (const SeedErrorView& s : r.per_seed)
      o << "  seed " << (s.seed ? std::to_string(*s.seed) : std::string("?")) << "       worst relative error "
        << (std::isnan(s.worst_rel_err) ? std::string("NaN") : fmt_g(s.worst_rel_err)) << " over " << count_or_unknown(s.checked)
        << " " << noun << "s (gate " << fmt_g(r.gate) << ")\n";
  if (r.gpu_span_us.present && graded_time(r).present) {
    const FigureView& s = graded_time(r);
    std::string label = "time/" + (r.unit.empty() ? std::string("sample") : r.unit);
    label.resize(std::max<size_t>(label.size() + 1, 13), ' ');
    o << "  " << label << fmt_g(s.median, 5) << " us " << graded_time_label(r) << " (q1 " << fmt_g(s.q1, 5) << ", q3 "
      << fmt_g(s.q3, 5) << ", n " << count_or_unknown(s.n) << "), "
      << (r.clock == "wall" ? "GPU span " + fmt_g(r.gpu_span_us.median, 5) + " us, " : std::string())
      // A figure the report lacks is said so, not printed as nan (a newcomer's report without host_wall_us).
      << (std::isnan(r.host_wall_us.median) ? std::string("no host wall time") : "host wall " + fmt_g(r.host_wall_us.median, 5) + " us")
      << ", " << (std::isnan(r.kernels_per_call.median) ? std::string("no kernel count") : fmt_g(r.kernels_per_call.median, 4) + " kernels/" + noun)
      << (r.graph_records != "graphs"              ? std::string()
          : r.graph_launches_per_call.present ? " + " + fmt_g(r.graph_launches_per_call.median, 4) + " graph launches/" + noun +
                                                    " recorded whole (--graph-records graphs)"
                                              : " (graphs recorded whole: --graph-records graphs)")
      << "\n";
    const double floor = r.floor_measured_copy_bw_us;
    if (!std::isnan(r.tflops)) {
      o << "  throughput   " << fmt_g(r.tflops, 4) << " TFLOP/s, " << fmt_g(r.achieved_bandwidth_Bps / 1e12, 3) << " TB/s of the "
        << fmt_g(r.bytes_per_call / 1e6, 4) << " MB a " << noun << " must move";
      if (!std::isnan(floor))
        o << "; floor " << fmt_g(floor, 4) << " us at the measured copy bandwidth -> " << fmt_g(100 * r.fraction_of_measured_bw, 3)
          << "% of it";
      o << "\n";
    } else if (!std::isnan(floor)) {
      o << "  roofline     " << fmt_g(r.bytes_per_call / 1e9, 4) << " GB/" << noun << "; floor " << fmt_g(floor, 4)
        << " us at the measured copy bandwidth " << fmt_g(r.copy_bandwidth_Bps / 1e12, 3) << " TB/s -> "
        << fmt_g(100 * r.fraction_of_measured_bw, 3) << "% of it\n";
    }
    if (!std::isnan(r.floor_weight_read_us))
      o << "  read floor   " << fmt_g(r.floor_weight_read_us, 4)
        << " us for a kernel that only reads W's codes and scales (same flush, same timer) -> "
        << fmt_g(100 * r.floor_weight_read_us / s.median, 3) << "% of it\n";
    between_calls_line(o, r);
  }
  if (!r.sandbox_layers.empty()) o << sandbox_line(r);
  o << "  report       " << (report_path.empty() ? std::string("-") : report_path) << "  ("
    << (std::isnan(r.wall_seconds_total) ? std::string("?") : fmt_g(r.wall_seconds_total, 3)) << " s)\n";
  return o.str();
}

}  // namespace nibble
