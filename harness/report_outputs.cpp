// report_outputs.cpp: what a grade writes besides its report, read from the report through
// ReportView: the timing in Google Benchmark's JSON format (--gbench-json) and one line of the
// history file (--history). Declared in report_view.h.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "fixtures/safetensors.h"
#include "harness/report_view.h"
#include "harness/stats.h"

namespace nibble {

using json = nlohmann::ordered_json;

namespace {

json commit_of(const ReportView& r) { return r.git_commit ? json(*r.git_commit) : json(nullptr); }

}  // namespace

/** Google Benchmark's layout (context + one "iteration" entry per timed call + median/mean/stddev
 *  aggregates), so tools built for it (tools/compare.py, dashboards) read nibble results
 *  unchanged. Times in microseconds. */
json gbench_json(const json& report) {
  const ReportView r = graded_report_view(report);
  json g;
  g["context"] = {{"date", r.created_utc},
                  {"host_name", r.host_name},
                  {"executable", "nibble grade"},
                  {"num_cpus", r.host_cpus},
                  {"mhz_per_cpu", 0},
                  {"cpu_scaling_enabled", false},
                  {"caches", json::array()},
                  {"library_build_type", "release"},
                  {"nibble_report_schema", r.schema_version},
                  {"gpu", r.device_name},
                  {"commit", commit_of(r)},
                  {"nibble_clock", r.clock},
                  {"nibble_graph_records", r.graph_records}};
  json benches = json::array();
  if (r.gpu_span_us.present) {
    const std::string base = r.task + "/" + r.config + "/" + (r.solution_name == "?" ? "solution" : r.solution_name);
    const double bytes = std::isnan(r.bytes_per_call) ? 0.0 : r.bytes_per_call;
    int family = 0;
    for (const std::string& fig : timed_figures()) {
      const std::string name = base + "/" + fig.substr(0, fig.size() - 3);  // gpu_span, host_wall, grader_clock
      const std::vector<double>& samples = timed_figure(r, fig).samples;
      if (samples.empty()) continue;
      int i = 0;
      for (double us : samples) {
        benches.push_back({{"name", name}, {"family_index", family}, {"per_family_instance_index", 0}, {"run_name", name},
                           {"run_type", "iteration"}, {"repetitions", int(samples.size())}, {"repetition_index", i++},
                           {"threads", 1}, {"iterations", 1}, {"real_time", us}, {"cpu_time", us}, {"time_unit", "us"},
                           {"bytes_per_second", bytes / (us * 1e-6)}});
      }
      const Summary s = summarize(samples);
      for (auto [agg, v] : {std::pair<const char*, double>{"mean", s.mean}, {"median", s.median}, {"stddev", s.stdev}}) {
        benches.push_back({{"name", name + "_" + agg}, {"family_index", family}, {"per_family_instance_index", 0},
                           {"run_name", name}, {"run_type", "aggregate"}, {"repetitions", int(samples.size())},
                           {"threads", 1}, {"aggregate_name", agg}, {"aggregate_unit", "time"}, {"iterations", int(samples.size())},
                           {"real_time", v}, {"cpu_time", v}, {"time_unit", "us"}});
      }
      ++family;
    }
  }
  g["benchmarks"] = benches;
  return g;
}

/** One JSON line per grade (commit, date, GPU, solution, median, worst error): a run's trace over
 *  time without keeping every report. */
void append_history(const std::string& path, const json& report, const std::string& report_path) {
  const ReportView r = graded_report_view(report);
  json h;
  h["date"] = r.created_utc;
  h["commit"] = commit_of(r);
  h["gpu"] = r.device_name;
  h["task"] = r.task;
  h["config"] = r.config;
  h["solution"] = r.solution_name == "?" ? "" : r.solution_name;
  h["solution_sha256"] = r.solution_sha256;
  h["disposition"] = r.disposition;
  const FigureView& t = graded_time(r);
  h["median_us"] = t.present && !std::isnan(t.median) ? json(t.median) : json(nullptr);
  h["clock"] = r.clock;
  // The mode the median depends on ("" where the timed calls launched no CUDA graph: figure_graph_records)
  h["graph_records"] = r.graph_records;
  h["graph_records_of_figure"] = figure_graph_records(r);
  h["worst_rel_err"] = std::isnan(r.worst_rel_err) ? json(nullptr) : json(r.worst_rel_err);
  h["report"] = std::filesystem::absolute(report_path).string();
  const std::string line = json_text(h) + "\n";
  // One write of one line with O_APPEND: concurrent graders interleave whole lines, never bytes.
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw std::runtime_error("cannot append to history file " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot append to history file " + path);
}

}  // namespace nibble
