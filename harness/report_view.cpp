// report_view.cpp: load, validate and summarise a `nibble grade` report (see report_view.h).
#include "harness/report_view.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "fixtures/gemm_fp4/gemm_config.h"
#include "fixtures/decode/decode_config.h"

namespace nibble {

using json = nlohmann::ordered_json;

std::string fmt_g(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

const std::vector<std::string>& timed_figures() {
  static const std::vector<std::string> f = {"gpu_span_us", "host_wall_us"};
  return f;
}

void validate_report(const json& r, const std::string& what) {
  if (!r.is_object()) throw BadReport(what + ": not a nibble report (the top level is not a JSON object)");
  if (!r.contains("schema") || !r["schema"].is_string())
    throw BadReport(what + ": not a nibble report (no \"schema\" field)");
  if (r["schema"] != "nibble.report")
    throw BadReport(what + ": not a nibble report (schema is " + r["schema"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ", expected \"nibble.report\")");
  // Reports of a later major schema version may mean other things by the same fields.
  if (r.contains("schema_version") &&
      (!r["schema_version"].is_string() || r["schema_version"].get<std::string>().rfind("1.", 0) != 0))
    throw BadReport(what + ": schema_version " + r["schema_version"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                    " is not one this nibble reads (1.x); use the nibble that wrote it");
  for (const char* k : {"task", "config", "disposition"})
    if (!r.contains(k) || !r[k].is_string())
      throw BadReport(what + ": malformed nibble report: \"" + k + "\" is missing or not a string");
  // Every figure is read in its task's terms (steps or calls, GB/step or TFLOP/s): a task this
  // nibble does not know would be shown as nan figures, not as the report it is.
  if (const std::string task = r["task"].get<std::string>(); task != kDecodeTask && !is_gemm_task(task))
    throw BadReport(what + ": task \"" + task + "\" is not one this nibble grades (" + kDecodeTask +
                    ", or a GEMM task: nibble configs lists them)");
  if (!r.contains("correctness") || !r["correctness"].is_object())
    throw BadReport(what + ": malformed nibble report: \"correctness\" is missing or not an object");
  // A Passed grade states the error it passed with (every report nibble writes does): without it,
  // compare would call the report a correctness regression (exit 2) rather than bad input.
  if (r["disposition"] == "Passed") {
    const json& c = r["correctness"];
    if (!c.contains("worst_rel_err") || !c["worst_rel_err"].is_number() || !std::isfinite(c["worst_rel_err"].get<double>()))
      throw BadReport(what + ": malformed nibble report: disposition Passed without a finite correctness.worst_rel_err");
  }
  if (r.contains("timing")) {
    if (!r["timing"].is_object()) throw BadReport(what + ": malformed nibble report: \"timing\" is not an object");
    for (const std::string& f : timed_figures()) {
      if (!r["timing"].contains(f)) continue;
      const json& s = r["timing"][f];
      if (!s.is_object() || !s.contains("samples") || !s["samples"].is_array())
        throw BadReport(what + ": malformed nibble report: timing." + f + " has no \"samples\" array");
      for (const json& v : s["samples"])
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
          throw BadReport(what + ": malformed nibble report: timing." + f + ".samples holds " + v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                          ", not a positive time");
    }
  }
}

double weight_read_floor_us(const nlohmann::ordered_json& report) {
  if (!report.is_object() || !report.contains("timing") || !report["timing"].is_object()) return NAN;
  const auto& t = report["timing"];
  if (!t.contains("floor_us_weight_read") || !t["floor_us_weight_read"].is_number()) return NAN;
  const double v = t["floor_us_weight_read"].get<double>();
  return std::isfinite(v) && v > 0 ? v : NAN;
}

bool is_gemm_report(const json& report) {
  return report.is_object() && report.contains("task") && report["task"].is_string() &&
         report["task"].get<std::string>().rfind("gemm-", 0) == 0;
}

json load_report(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw BadReport(path + ": no such file");
  if (fs::is_directory(path, ec)) throw BadReport(path + ": is a folder, not a report file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw BadReport(path + ": cannot be read");
  std::ostringstream ss;
  ss << f.rdbuf();
  json r;
  try {
    r = json::parse(ss.str());
  } catch (const json::exception& e) {  // parse errors, and numbers a double cannot hold (1e999)
    throw BadReport(path + ": not valid JSON (" + e.what() + ")");
  }
  validate_report(r, path);
  return r;
}

std::vector<double> figure_samples(const json& r, const std::string& figure) {
  std::vector<double> out;
  if (!r.contains("timing") || !r["timing"].is_object() || !r["timing"].contains(figure)) return out;
  const json& s = r["timing"][figure];
  if (!s.is_object() || !s.contains("samples") || !s["samples"].is_array()) return out;
  for (const json& v : s["samples"])
    if (v.is_number()) out.push_back(v.get<double>());
  return out;
}

double worst_rel_err(const json& r) {
  const json& c = r["correctness"];
  if (!c.is_object() || !c.contains("worst_rel_err") || !c["worst_rel_err"].is_number())
    return std::numeric_limits<double>::quiet_NaN();
  return c["worst_rel_err"].get<double>();
}

double report_gate(const json& r) {
  const json& c = r["correctness"];
  if (!c.is_object() || !c.contains("gate") || !c["gate"].is_number()) return std::numeric_limits<double>::quiet_NaN();
  return c["gate"].get<double>();
}

std::string device_name(const json& r) {
  if (!r.contains("device") || !r["device"].is_object()) return "";
  const json& d = r["device"];
  return d.contains("name") && d["name"].is_string() ? d["name"].get<std::string>() : "";
}

std::string solution_name(const json& r) {
  if (r.contains("solution") && r["solution"].is_object()) {
    const json& s = r["solution"];
    if (s.contains("name") && s["name"].is_string() && !s["name"].get<std::string>().empty()) return s["name"];
    if (s.contains("path") && s["path"].is_string()) return std::filesystem::path(s["path"].get<std::string>()).filename();
  }
  return "?";
}

namespace {

std::string str_or(const json& o, const char* k, const std::string& dflt) {
  return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : dflt;
}

double num_or(const json& o, const char* k, double dflt) {
  return o.is_object() && o.contains(k) && o[k].is_number() ? o[k].get<double>() : dflt;
}

/** The between-calls line: only when the grade saw kernels outside the windows (foreign ones in a
 *  gap, which make the grade InvalidTiming, or late ones, recorded only). */
void between_calls_line(std::ostream& o, const json& t) {
  const double gaps = num_or(t, "gaps_with_foreign_kernels", 0), late = num_or(t, "late_kernels", 0);
  if (!(gaps > 0) && !(late > 0)) return;
  o << "  between      " << fmt_g(gaps, 6) << " gaps between timed calls held kernels beyond the harness's own ("
    << fmt_g(num_or(t, "harness_kernels_per_gap", NAN), 3) << " per gap); " << fmt_g(late, 6)
    << " kernels reached the timer only after their window or gap was collected\n";
}

}  // namespace

// Mirrors the block "5. The summary a person reads" of harness/grade.cpp line for line; where the
// grade used its in-memory state (bytes per step, copy bandwidth, worst error) this reads the same
// numbers from the fields the grade wrote them to.
std::string format_summary(const json& report, const std::string& report_path) {
  const json none = json::object();
  const json& sol = report.contains("solution") ? report["solution"] : none;
  const json& corr = report["correctness"];
  const std::string config = str_or(report, "config", "?");
  const double worst = worst_rel_err(report);
  std::ostringstream o;
  o << "\nnibble grade  " << str_or(report, "task", "?") << " / " << config << "  on "
    << (device_name(report).empty() ? "?" : device_name(report)) << "\n";
  o << "  solution     " << str_or(sol, "name", "?") << "  (" << str_or(sol, "path", "?") << ")\n";
  o << "  disposition  " << str_or(report, "disposition", "?") << ": " << str_or(report, "reason", "") << "\n";
  // correctness.calibration: where the drop-the-feature table puts the gate's neighbours.
  const json& cc = corr.contains("calibration") ? corr["calibration"] : none;
  if (cc.is_object() && cc.contains("legitimate_variants_worst")) {
    // No must-fail row leaves +inf, which JSON stores as null.
    const json& d = cc.contains("dropped_feature_variants_best") ? cc["dropped_feature_variants_best"] : none;
    o << "  calibration  legitimate precision variants reach " << fmt_g(num_or(cc, "legitimate_variants_worst", NAN))
      << ", dropped features start at " << (d.is_number() ? fmt_g(d.get<double>()) : std::string("inf")) << " (gate "
      << fmt_g(report_gate(report)) << ")\n";
  }
  // A GEMM task's report counts calls (C = A W^T), a decode task's steps (tokens).
  const bool gemm = is_gemm_report(report);
  const json per_seed = corr.contains("per_seed") && corr["per_seed"].is_array() ? corr["per_seed"] : json::array();
  if (!std::isnan(worst) && !per_seed.empty()) {
    for (const auto& s : per_seed)
      if (s.is_object() && s.contains("worst_rel_err")) {
        std::string over;
        if (gemm) {
          const size_t calls = (s.contains("calls") && s["calls"].is_array() ? s["calls"].size() : 0) +
                               (s.contains("timed_call") && s["timed_call"].is_array() ? s["timed_call"].size() : 0);
          over = std::to_string(calls) + " calls";
        } else {
          over = (corr.contains("checked_steps") ? corr["checked_steps"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                                 : std::string("?")) + " steps";
        }
        o << "  seed " << (s.contains("seed") ? s["seed"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : std::string("?")) << "       worst relative error "
          << (s["worst_rel_err"].is_number() ? fmt_g(s["worst_rel_err"].get<double>()) : std::string("NaN")) << " over " << over
          << " (gate " << fmt_g(report_gate(report)) << ")\n";
      }
  }
  if (gemm && report.contains("timing") && report["timing"].is_object() && report["timing"].contains("gpu_span_us")) {
    const json& t = report["timing"];
    const json& s = t["gpu_span_us"];
    const json& w = t.contains("host_wall_us") ? t["host_wall_us"] : none;
    const json& k = t.contains("kernels_per_call") ? t["kernels_per_call"] : none;
    const double median = num_or(s, "median", NAN);
    o << "  time/call    " << fmt_g(median, 5) << " us median GPU span (q1 " << fmt_g(num_or(s, "q1", NAN), 5) << ", q3 "
      << fmt_g(num_or(s, "q3", NAN), 5) << ", n " << (s.contains("n") ? s["n"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : std::string("?"))
      << "), host wall " << fmt_g(num_or(w, "median", NAN), 5) << " us, " << fmt_g(num_or(k, "median", NAN), 4)
      << " kernels/call\n";
    o << "  throughput   " << fmt_g(num_or(t, "tflops", NAN), 4) << " TFLOP/s, " << fmt_g(num_or(t, "achieved_bandwidth_Bps", NAN) / 1e12, 3)
      << " TB/s of the " << fmt_g(num_or(t, "bytes_per_call", NAN) / 1e6, 4) << " MB a call must move";
    if (t.contains("floor_us_measured_copy_bw"))
      o << "; floor " << fmt_g(num_or(t, "floor_us_measured_copy_bw", NAN), 4) << " us at the measured copy bandwidth -> "
        << fmt_g(100 * num_or(t, "floor_us_measured_copy_bw", NAN) / median, 3) << "% of it";
    o << "\n";
    if (const double rf = weight_read_floor_us(report); !std::isnan(rf))
      o << "  read floor   " << fmt_g(rf, 4) << " us for a kernel that only reads W's codes and scales (same flush, same timer) -> "
        << fmt_g(100 * rf / median, 3) << "% of it\n";
    between_calls_line(o, t);
  } else if (report.contains("timing") && report["timing"].is_object() && report["timing"].contains("gpu_span_us")) {
    const json& t = report["timing"];
    const json& s = t["gpu_span_us"];
    const json& w = t.contains("host_wall_us") ? t["host_wall_us"] : none;
    const json& k = t.contains("kernels_per_step") ? t["kernels_per_step"] : none;
    o << "  time/token   " << fmt_g(num_or(s, "median", NAN), 5) << " us median GPU span (q1 " << fmt_g(num_or(s, "q1", NAN), 5)
      << ", q3 " << fmt_g(num_or(s, "q3", NAN), 5) << ", n " << (s.contains("n") ? s["n"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : std::string("?"))
      << "), host wall " << fmt_g(num_or(w, "median", NAN), 5) << " us, " << fmt_g(num_or(k, "median", NAN), 4)
      << " kernels/step\n";
    if (t.contains("floor_us_measured_copy_bw")) {
      const double bytes = num_or(t, "bytes_per_step", NAN);
      const double copy_bw = report.contains("device") && report["device"].contains("copy_bandwidth")
                                 ? num_or(report["device"]["copy_bandwidth"], "median_Bps", NAN)
                                 : NAN;
      o << "  roofline     " << fmt_g(bytes / 1e9, 4) << " GB/step; floor " << fmt_g(num_or(t, "floor_us_measured_copy_bw", NAN), 4)
        << " us at the measured copy bandwidth " << fmt_g(copy_bw / 1e12, 3) << " TB/s -> "
        << fmt_g(100 * num_or(t, "fraction_of_measured_bw", NAN), 3) << "% of it\n";
    }
    between_calls_line(o, t);
  }
  const double total = report.contains("wall_seconds") ? num_or(report["wall_seconds"], "total", NAN) : NAN;
  o << "  report       " << (report_path.empty() ? std::string("-") : report_path) << "  ("
    << (std::isnan(total) ? std::string("?") : fmt_g(total, 3)) << " s)\n";
  return o.str();
}

std::string format_summary(const json& report) { return format_summary(report, ""); }

}  // namespace nibble
