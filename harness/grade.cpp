// grade.cpp: `nibble grade`, the parent side, for every task (docs/architecture.md "Data flow").
//
// probe child -> fixtures (cached, verified by SHA-256) -> per seed: candidate child, fixture
// re-check, reference child (its checked calls, and a replay of the candidate's kept timed calls)
// -> one comparison of outputs in fp64 -> timing summary -> judge() -> report (atomic) + summary.
// The parent holds no CUDA context and never dlopens a candidate.
#include "harness/grade.h"
#include "harness/python_solution.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/child.h"
#include "harness/grade_common.h"
#include "harness/html_report.h"
#include "harness/lineup.h"
#include "harness/outputs.h"
#include "harness/profile.h"
#include "harness/process.h"
#include "harness/report_view.h"
#include "harness/stats.h"
#include "harness/task.h"
#include "harness/task_anchors.h"
#include "harness/verdict.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

/** A failure of the grader itself (its reference missing or failing), not of the candidate. */
struct GraderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** Where the candidate sits in the committed (or given) drop-the-feature table of this config, so a
 *  reader sees whether a pass is comfortable or marginal. Null when there is no table. */
json calibration_context(const std::string& cal, double worst) {
  if (cal.empty()) return nullptr;
  try {
    const json c = parse_ordered_json_bounded(read_file(cal), cal);
    double legit = 0, dropped = INFINITY;
    json rows = json::array();
    for (const auto& row : c.at("rows")) {
      rows.push_back({{"variant", row.at("variant")}, {"worst", row.at("worst")}, {"expected", row.at("expected")}});
      if (row.at("worst").is_null()) continue;
      const double w = row.at("worst").get<double>();
      if (row.at("expected") == "PASS") legit = std::max(legit, w);
      else dropped = std::min(dropped, w);
    }
    json ctx = {{"source", cal}, {"device", c.contains("device") ? c["device"].value("name", "") : "cpu oracle"},
                {"legitimate_variants_worst", legit}, {"dropped_feature_variants_best", dropped}, {"rows", rows}};
    if (!std::isnan(worst)) {
      ctx["candidate_worst"] = worst;
      ctx["candidate_over_legitimate_worst"] = legit > 0 ? worst / legit : INFINITY;
    }
    return ctx;
  } catch (const std::exception& e) {
    return {{"source", cal}, {"error", e.what()}};
  }
}

/** Throws std::runtime_error unless the candidate's kept timed outputs, and the reference's replay
 *  of them, are each exactly the calls the grader's ledger picked (names "timed<round>-<call>.<output>";
 *  the reference's file also holds the checked calls, "call<n>.<output>"). The replay follows the
 *  spec the candidate's child wrote (Result::replay), which the candidate can write itself: a spec
 *  that leaves out a picked call would leave that call's outputs compared with nothing. */
void check_kept_calls(const SafetensorsFile& timed, const SafetensorsFile& reference, const CallLedger& ledger) {
  std::set<std::string> picked, got, replayed;
  for (const LedgerCall& c : ledger.calls())
    if (c.kept) picked.insert(timed_call_name(c.round, c.call));
  for (const auto& e : timed.entries()) got.insert(e.name.substr(0, e.name.find('.')));
  for (const auto& e : reference.entries())
    if (e.name.rfind("timed", 0) == 0) replayed.insert(e.name.substr(0, e.name.find('.')));
  if (picked != got)
    throw std::runtime_error("the kept timed calls (" + std::to_string(got.size()) + ") are not the " +
                             std::to_string(picked.size()) + " the grader picked");
  if (picked != replayed)
    throw std::runtime_error("the replay spec the candidate's child wrote covers " + std::to_string(replayed.size()) +
                             " timed calls, not the " + std::to_string(picked.size()) + " the grader picked");
}

/** The call ledger's part of the report (the grader's own clock, the kept calls, NVML's clocks)
 *  and of the evidence; returns, per timed call, whether its round ran throttled. */
std::vector<bool> ledger_section(const CallLedger& ledger, const Task& task, const std::string& config,
                                 const json& facts, Evidence* ev, json* out) {
  const auto& calls = ledger.calls();
  const WindowWork ww = task.window_work(config, facts);
  ev->window_work_us = window_work_credit_us(ww.staged_bytes, ww.digested_bytes);
  ev->host_launch_us = ledger.host_launch_us().value_or(0.0);
  ev->ledger_calls = int(calls.size());
  ev->ledger_violation = ledger.violation();
  std::vector<double> window, sm, mem, cal_window, cal_span;
  for (const LedgerCall& c : calls) window.push_back(c.window_us);
  const auto& cal = ledger.calibration();
  for (const LedgerCall& c : cal) {
    cal_window.push_back(c.window_us);
    cal_span.push_back(c.span_us);
  }
  const std::vector<double> cal_gap = calibration_overheads_us(task, config, facts, cal_window, cal_span);
  const Summary w = summarize(window), o = summarize(cal_gap);
  ev->window_median_us = w.median;
  ev->window_overhead_us = cal_gap.empty() ? 0.0 : o.median;
  std::vector<int> throttled_rounds;
  std::vector<bool> throttled(calls.size(), false);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].sm_mhz > 0) sm.push_back(calls[i].sm_mhz);
    if (calls[i].mem_mhz > 0) mem.push_back(calls[i].mem_mhz);
    if ((calls[i].clock_events & kThrottleReasons) &&
        (throttled_rounds.empty() || throttled_rounds.back() != calls[i].round))
      throttled_rounds.push_back(calls[i].round);
  }
  for (size_t i = 0; i < calls.size(); ++i)
    throttled[i] = std::find(throttled_rounds.begin(), throttled_rounds.end(), calls[i].round) != throttled_rounds.end();
  json kept = json::array();
  for (const LedgerCall& c : calls)
    if (c.kept) kept.push_back(timed_call_name(c.round, c.call));
  json clocks = {{"nvml", ledger.nvml_available() ? json("sampled after every timed call") : json(ledger.nvml_why())}};
  if (!sm.empty()) clocks["sm_mhz"] = summary_json(summarize(sm));
  if (!mem.empty()) clocks["memory_mhz"] = summary_json(summarize(mem));
  clocks["throttled_rounds"] = throttled_rounds;
  clocks["throttle_reasons_mask"] = kThrottleReasons;
  int most = -1;
  for (const LedgerCall& c : calls) most = std::max(most, c.gpu_processes);
  ev->started_on_gpu = ledger.started_on_gpu();
  const json gpu_processes = {{"most", most >= 0 ? json(most) : json(nullptr)}, {"started_by_candidate", ev->started_on_gpu}};
  *out = {{"window_us", summary_json(w, &window)},
          {"overhead_us", ev->window_overhead_us},
          {"overhead_credited_us", credited_overhead_us(*ev)},
          {"overhead_credit_cap_us", overhead_credit_cap_us(*ev)},
          {"harness_bytes_per_window", {{"staged", ww.staged_bytes}, {"digested", ww.digested_bytes}}},
          {"calibration_windows", cal.size()},
          {"calibration_windows_credited", cal_gap.size()},
          {"calibration", {{"window_us", cal_window}, {"span_us", cal_span},
                           {"forms", task.window_work_forms(config)}}},
          {"hidden_us", hidden_time_us(*ev)},
          {"hidden_allowance_us", hidden_time_allowance_us(ev->span_median_us, ev->host_launch_us)},
          {"host_launch_us", ledger.host_launch_us() ? json(*ledger.host_launch_us()) : json(nullptr)},
          {"host_slowdown", host_slowdown(ev->host_launch_us)},
          {"kept", kept},
          {"violation", ledger.violation()},
          {"clocks", clocks},
          {"gpu_processes", gpu_processes}};
  return throttled;
}

/** The report's timing section from the candidate's record and the grader's call ledger, and the
 *  timing part of the evidence; `clock` ("span" or "wall", GradeOptions::clock) picks the figure of
 *  merit. */
json timing_section(const Task& task, const std::string& config, const TimingResult& tr, const CallLedger& ledger,
                    const json& device, const json& facts, const std::string& clock, Evidence* ev) {
  json t;
  t["unit"] = task.unit();
  t["clock"] = clock;
  ev->timed = true;
  ev->wall_clock = clock == "wall";
  ev->samples = int(tr.gpu_span_us.size());
  ev->invalid_samples = tr.invalid_samples;
  ev->invalid_reason = tr.invalid_reason;
  ev->gaps_with_foreign_work = tr.gaps_with_foreign_work;
  ev->foreign_work = tr.foreign_work;
  ev->foreign_records_before_build = tr.foreign_records_before_build;
  ev->launches_audited = tr.launches_audited;
  ev->unrecorded_launches = tr.unrecorded_launches;
  ev->first_unrecorded_launch = tr.first_unrecorded_launch;
  ev->launch_callbacks_lost = tr.launch_callbacks_lost;
  ev->copies_audited = tr.copies_audited;
  ev->unrecorded_copies = tr.unrecorded_copies;
  ev->first_unrecorded_copy = tr.first_unrecorded_copy;
  ev->device_launch_graphs = tr.device_launch_graphs;
  ev->late_kernels = tr.late_kernels;
  ev->dropped_records = tr.dropped_records;
  ev->nonfinite_timed_calls = tr.nonfinite_calls;
  const Roofline roof = task.roofline(config, facts);
  const double copy_bw = device.contains("copy_bandwidth") ? device["copy_bandwidth"].value("median_Bps", 0.0) : 0.0;
  const double peak_bw = device.value("theoretical_bandwidth_Bps", 0.0);
  // Rounds the GPU ran throttled (NVML) are left out of the median while any other round is left.
  const Summary all_spans = summarize(tr.gpu_span_us);
  ev->span_median_us = all_spans.median;
  json ledger_j;
  const std::vector<bool> throttled = ledger_section(ledger, task, config, facts, ev, &ledger_j);
  ev->uncommitted_timing = uncommitted_timing(ledger.calls(), ledger.audit(), tr.gpu_span_us, timing_audit(tr));
  // The figure: each call's GPU span, or (--clock wall) its window on the grader's clock
  // (grader_clock_samples; the ledger's calls are the timed calls, in order).
  std::vector<double> all_figure = tr.gpu_span_us;
  if (ev->wall_clock) {
    std::vector<double> windows;
    for (const LedgerCall& c : ledger.calls()) windows.push_back(c.window_us);
    all_figure = grader_clock_samples(windows, credited_overhead_us(*ev), tr.gpu_span_us);
  }
  std::vector<double> spans, figure;
  for (size_t i = 0; i < tr.gpu_span_us.size(); ++i)
    if (i >= throttled.size() || !throttled[i]) {
      spans.push_back(tr.gpu_span_us[i]);
      if (i < all_figure.size()) figure.push_back(all_figure[i]);
    }
  const bool excluded = !spans.empty() && spans.size() < tr.gpu_span_us.size();
  if (!excluded) {
    spans = tr.gpu_span_us;
    figure = all_figure;
  }
  ledger_j["clocks"]["throttled_rounds_excluded_from_median"] = excluded;
  if (!tr.gpu_span_us.empty()) {
    std::vector<double> kernels(tr.kernels.begin(), tr.kernels.end());
    // A wall grade whose ledger saw no call (InvalidTiming by the ledger's count) keeps its spans.
    const Summary sp = summarize(spans), s = figure.empty() ? sp : summarize(figure), w = summarize(tr.host_wall_us);
    ev->span_min_us = all_spans.min;
    ev->wall_median_us = w.median;
    t["us_per_call"] = s.median;
    t["gpu_span_us"] = summary_json(sp, &tr.gpu_span_us);
    if (ev->wall_clock) t["grader_clock_us"] = summary_json(s, &all_figure);
    t["host_wall_us"] = summary_json(w, &tr.host_wall_us);
    t["busy_us"] = summary_json(summarize(tr.busy_us), &tr.busy_us);
    t["kernels_per_call"] = summary_json(summarize(kernels));
    std::vector<double> graphs(tr.graphs.begin(), tr.graphs.end());
    if (!graphs.empty()) t["graph_launches_per_call"] = summary_json(summarize(graphs));
    t["wall_over_span_median"] = w.median / sp.median;
    t["bytes_per_call"] = roof.bytes;
    t["bytes_note"] = roof.bytes_note;
    t["flops_per_call"] = roof.flops;
    t["tflops"] = roof.flops / (s.median * 1e-6) / 1e12;
    t["achieved_bandwidth_Bps"] = roof.bytes / (s.median * 1e-6);
    json floors = json::object();
    if (peak_bw > 0) {
      floors["theoretical_bw_us"] = roof.bytes / peak_bw * 1e6;
      t["fraction_of_theoretical_bw"] = roof.bytes / peak_bw * 1e6 / s.median;
      ev->floor_us = roof.bytes / peak_bw * 1e6;
    }
    if (copy_bw > 0) {
      floors["measured_copy_bw_us"] = roof.bytes / copy_bw * 1e6;
      t["fraction_of_measured_bw"] = roof.bytes / copy_bw * 1e6 / s.median;
    }
    if (device.contains("read_floor") && device["read_floor"].value("median_us", 0.0) > 0) {
      const double rf = device["read_floor"]["median_us"].get<double>();
      floors["weight_read_us"] = rf;
      t["fraction_of_weight_read_floor"] = rf / s.median;
    }
    t["floors"] = floors;
  }
  t["host_wall_informational"] = task.host_wall_informational();
  t["rounds"] = tr.rounds;
  t["calls_per_round"] = tr.calls_per_round;
  t["stop_reason"] = tr.stop_reason;
  t["invalid_samples"] = tr.invalid_samples;
  t["invalid_reason"] = tr.invalid_reason;
  t["nonfinite_outputs"] = tr.nonfinite_calls;
  t["gaps_with_foreign_work"] = tr.gaps_with_foreign_work;
  t["foreign_work"] = tr.foreign_work;
  t["foreign_records_before_build"] = tr.foreign_records_before_build;
  t["harness_records_per_gap"] = tr.harness_records_per_gap;
  t["late_kernels"] = tr.late_kernels;
  t["launches_audited"] = tr.launches_audited;
  t["unrecorded_launches"] = tr.unrecorded_launches;
  t["first_unrecorded_launch"] = tr.first_unrecorded_launch;
  t["launch_callbacks_lost"] = tr.launch_callbacks_lost;
  t["dropped_records"] = tr.dropped_records;
  t["copies_audited"] = tr.copies_audited;
  t["unrecorded_copies"] = tr.unrecorded_copies;
  t["first_unrecorded_copy"] = tr.first_unrecorded_copy;
  t["device_launch_graphs"] = tr.device_launch_graphs;
  t["graph_launches_audited"] = tr.graph_launches_audited;
  t["timing_seed"] = tr.seed ? json(*tr.seed) : json(nullptr);
  t["timing_seed_from"] = tr.seed_from;
  t["task_figures"] = json(tr.task_figures);
  t["ledger"] = ledger_j;
  return t;
}

}  // namespace

namespace {

/** A file's identity and last write (stat, links followed; exists false when there is none). A
 *  report is written by a rename (write_file_atomic), so one whose stamp did not change over a grade
 *  is an earlier run's. */
struct FileStamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  long long mtime_ns = 0;
  bool operator==(const FileStamp& o) const {
    return exists == o.exists && dev == o.dev && ino == o.ino && mtime_ns == o.mtime_ns;
  }
};

FileStamp file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino, (long long)(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
}

/** Job `j` of a Python solution: its family's shim in the .so's place, a scratch folder of its own
 *  (made into `scratch`, removed when it goes) and processes allowed (Triton runs ptxas). Throws
 *  std::runtime_error when the folder cannot be made. */
void make_python_job(Job& j, const std::string& shim, std::optional<PythonScratch>& scratch) {
  scratch.emplace();
  j.python_shim = shim;
  j.python_scratch = scratch->path();
  j.sandbox.allow_processes = true;
}

/** Where no GPU answers: whether `solution` at least opens here as a grade would open it (a "load"
 *  job in a sandboxed child, `require_sandbox` as the grade's: the library, its entry points and ABI
 *  version; a Python module imported through `shim`, "" for a .so), in one line for the user: what
 *  the solution wrote (its name, a traceback) with control characters blanked and cut short. The
 *  child gets at most 45 s and the import 30 s, less where the grade's --timeout or
 *  --build-timeout (`opt`) says less. */
std::string opens_without_gpu(const Task& task, const std::string& config, const std::string& solution,
                              const std::string& shim, const SandboxSpec& sandbox, const GradeOptions& opt,
                              const BinaryPins& pins, const Log& log) {
  // A traceback's end says most (the exception and its line): a long one keeps its head and tail.
  const auto said = [](const std::string& text) {
    const std::string t = one_line(text);
    return t.size() > 700 ? t.substr(0, 200) + " ... " + t.substr(t.size() - 500) : t;
  };
  Job j;
  j.kind = "load";
  j.task = task.name();
  j.config = config;
  j.solution = solution;
  j.sandbox = sandbox;
  j.require_sandbox = opt.require_sandbox;
  // The grade's limit where it is shorter; one of 0 or less (none) leaves the check's own.
  const auto within = [](double own, double grade_limit) { return grade_limit > 0 ? std::min(own, grade_limit) : own; };
  j.build_timeout_seconds = within(30.0, opt.build_timeout_seconds);  // a module's import (torch: ~5-10 s cold)
  std::optional<PythonScratch> scratch;
  try {
    if (!shim.empty()) make_python_job(j, shim, scratch);
  } catch (const std::exception& e) {
    return std::string("Whether the solution opens here was not checked: ") + e.what();
  }
  const ChildRun c = run_job_child(j, within(45.0, opt.timeout_seconds), &log, "load check", &pins);
  if (c.completed())
    return "The solution opens here (" + (c.result->solution_name.empty() ? std::string("no name") : "'" + said(c.result->solution_name) + "'") +
           "): " + (shim.empty() ? "it exports every entry point of this nibble's ABI version" : "its module imports and defines every entry point") + ".";
  if (c.result && c.result->error && c.result->error->kind == kErrLoad) {
    const std::string& kind = c.result->error->load_kind;
    // A missing entry point or another ABI version is the solution's on any machine; a library or
    // module that cannot load may need what only a GPU machine has (libcuda.so.1, CUDA at import):
    // said where its message is about the driver or CUDA's start, not after a SyntaxError (the
    // solution's own path, which may well hold "cuda", left out of the test).
    std::string msg = c.result->error->message;
    for (size_t at; !solution.empty() && (at = msg.find(solution)) != std::string::npos;) msg.erase(at, solution.size());
    for (char& ch : msg) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    bool about_gpu = false;
    for (const char* phrase : {"libcuda.so", "libnvidia", "driver", "no cuda-capable device", "cuda_error", "cudaerror", "cuinit"})
      about_gpu = about_gpu || msg.find(phrase) != std::string::npos;
    return "The solution does not open " + std::string(kind == "NotLoadable" ? "here" : "here or on a GPU") + " (" + kind +
           "): " + said(c.result->error->message) +
           (kind == "NotLoadable" && about_gpu ? " (without the NVIDIA driver, a library linked to libcuda.so.1 or a module "
                                                 "that starts CUDA at import cannot open either)"
                                               : "");
  }
  // The sandbox's state is written (phase "start") before any solution code runs: a child that
  // ended there was ended by the library's constructors or the module's import.
  if (c.result && c.result->phase == "start" && c.refused.empty() &&
      (c.exit.kind == ChildExit::Exited || c.exit.kind == ChildExit::Signaled)) {
    const std::string at = crash_site(c.exit, c.log_tail);
    return "The solution does not open here: its load-time code (a library constructor, the module's import) ended "
           "the process (" + (at.empty() ? said(c.describe_failure()) : c.exit.describe() + ", at " + at) +
           "); a grade would end Crashed";
  }
  return "Whether the solution opens was not settled: " + said(c.describe_failure());
}

/** Why --profile `tool` cannot run here: what the grade says up front and its report's status. */
std::string profiler_missing(const std::string& tool) {
  return tool + " is not installed here (" + (tool == "ncu" ? "Nsight Compute" : "Nsight Systems") +
         ", part of the CUDA toolkit: put its bin folder on PATH)";
}

/** The report's "profile" section: the profiler's run of `pj` (kProfileCalls timed calls in NVTX
 *  ranges) stored next to the report, and the top kernels' figures; or why there is none. */
json profile_section(const GradeOptions& opt, Job pj, const BinaryPins& pins, const Log& log) {
  json p = {{"tool", opt.profile}};
  const std::string exe = find_profiler(opt.profile);
  if (exe.empty()) {
    p["status"] = "not run: " + profiler_missing(opt.profile) + "; the grade is complete without it";
    std::fprintf(stderr, "nibble grade: --profile %s: %s\n", opt.profile.c_str(), p["status"].get<std::string>().c_str());
    return p;
  }
  pj.profile_calls = kProfileCalls;
  pj.timing.reset();
  pj.require_sandbox = false;
  // The profiler talks to its target over localhost TCP (no network namespace, no Landlock TCP rule)
  // and writes its lock and temporary files (no Landlock); seccomp stays: the target needs no ptrace.
  pj.sandbox.skip = {"namespaces", "landlock"};
  pj.sandbox.skip_why = "a profiler's run after the verdict: the profiler talks to its target over local sockets and writes its own files";
  // ncu replays every kernel many times: a call takes far longer than when graded.
  pj.call_timeout_seconds = std::max(pj.call_timeout_seconds, 600.0);
  const std::vector<std::string> run = profiler_run_argv(opt.profile, exe, opt.out);
  std::string command;
  for (const std::string& a : run) command += (command.empty() ? "" : " ") + a;
  p["command"] = command + " <nibble __child>";
  p["calls"] = kProfileCalls;
  p["sandbox"] = "rlimits, no_new_privs and seccomp only: " + pj.sandbox.skip_why;
  // The profile goes next to the report, whose folder the report's own write (later) would make.
  std::error_code made;
  fs::create_directories(fs::absolute(opt.out).parent_path(), made);
  log("profiling: " + std::to_string(kProfileCalls) + " calls under " + exe);
  const ChildRun c = run_job_child(pj, opt.timeout_seconds, &log, "profiler: " + opt.profile, &pins, run);
  if (!c.completed()) {
    p["status"] = "failed: " + c.describe_failure().substr(0, 2000);
    std::fprintf(stderr, "nibble grade: --profile %s %s\n", opt.profile.c_str(), p["status"].get<std::string>().c_str());
    return p;
  }
  p["path"] = profile_path(opt.profile, opt.out);
  if (!fs::exists(p["path"].get<std::string>())) {
    p["status"] = "failed: the profiler wrote no profile (no kernel in the NVTX ranges, or no access to the GPU's counters: "
                  "ERR_NVGPUCTRPERM): " + c.log_tail.substr(c.log_tail.size() > 1500 ? c.log_tail.size() - 1500 : 0);
    p.erase("path");
    return p;
  }
  TempDir tmp("nibble-profile");
  const std::string csv = tmp.path() + "/export.csv";
  const ChildExit e = run_child(profiler_export_argv(opt.profile, exe, opt.out), csv, 300);
  try {
    if (e.kind != ChildExit::Exited || e.code != 0) throw std::runtime_error("the export " + e.describe() + ": " + file_tail(csv, 600));
    p["top_kernels"] = profile_top_kernels(opt.profile, read_file(csv));
    p["status"] = "done";
    std::error_code gone;  // nsys stats leaves its SQLite export beside the profile
    if (opt.profile == "nsys")
      fs::remove(p["path"].get<std::string>().substr(0, p["path"].get<std::string>().size() - 9) + ".sqlite", gone);
  } catch (const std::exception& x) {
    p["status"] = std::string("stored, but its figures could not be read: ") + x.what();
  }
  return p;
}

int grade_run(const GradeOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  json device_choice;
  const Task* task = checked_task("grade", opt.task, opt.config, [&] {
    check_grade_options(opt);
    device_choice = select_device(opt.device);
  });
  if (!task) return kExitUsage;
  // Said now, not only after the grade: a user who wants the profile can stop here and install it.
  if (!opt.profile.empty() && find_profiler(opt.profile).empty())
    std::fprintf(stderr, "nibble grade: --profile %s: %s; the grade runs, and its report's profile will say \"not run\"\n",
                 opt.profile.c_str(), profiler_missing(opt.profile).c_str());
  const std::string& config = opt.config;
  const std::string exe = self_exe();
  const std::string reference = bundled_reference(exe, *task, opt.reference);
  const std::string solution = fs::absolute(opt.solution).string();
  // A Python solution runs in its family's shim (python_solution.h), pinned like the solution.
  const bool python = is_python_solution(solution);
  const std::string shim = python ? python_shim_path(exe, task->abi()) : "";
  if (python) {
    try {
      check_python_grade(shim);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble grade: %s\n", e.what());
      return kExitUsage;
    }
  }
  if (!fs::exists(reference))
    throw GraderError("the reference " + reference + " does not exist; build the project (scripts/test.sh) or pass --reference");
  // A fixture the user named is checked before anything else (the cache is filled after the GPU
  // probe, so a machine without a GPU never builds gigabytes for nothing).
  std::vector<std::string> fixture_dirs;
  std::vector<FixtureManifest> manifests;  // as read before any candidate ran
  json fixtures = json::array();
  auto fixtures_stage = [&] {
    return fixture_stage(opt.seeds, [&](uint64_t seed) {
      std::string dir;
      FixtureManifest m;
      fixtures.push_back(ensure_fixture(*task, config, seed, opt.fixture_dir, opt.threads, opt.verify_fixture, log, &dir, &m));
      fixture_dirs.push_back(dir);
      manifests.push_back(m);
    });
  };
  if (!opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;

  json report = document_header("nibble.report", opt.argv, task->name(), config);
  report["schema_version"] = kReportSchemaVersion;
  report["config_dims"] = task->config_dims(config);
  report["seeds"] = opt.seeds;

  // What every child runs, pinned by content before the first child: each is checked again before
  // each child starts (run_job_child), so the report's hashes are what ran.
  BinaryPins pins;
  try {
    pins.pin("solution", solution);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  }
  try {
    pins.pin("nibble", exe);
    pins.pin("reference", reference);
    if (python) pins.pin("python shim", shim);
  } catch (const std::exception& e) {
    throw GraderError(std::string("the grader's own binaries cannot be read (") + e.what() + "); build the project or pass --reference");
  }

  // 1. The device: facts, copy bandwidth and the task's weight-read floor, in a child (the parent
  // stays CUDA-free), inside the sandbox every child gets: it also settles the sandbox of this run.
  log("probing the GPU");
  SandboxSpec sandbox;
  const Probe probe = probe_device(true, task->read_floor_bytes(config), &sandbox, opt.require_sandbox, &pins);
  if (!probe.ok && probe.sandbox_refused) {
    const char* off = std::getenv("NIBBLE_SANDBOX_DISABLE");
    std::fprintf(stderr, "nibble grade: %s\n  Grade without --require-sandbox to go on with the layers this machine has (the report lists them)%s.\n",
                 probe.why.c_str(),
                 off && *off ? (std::string(", or unset NIBBLE_SANDBOX_DISABLE (") + off + ") if you left a layer out yourself").c_str() : "");
    return kExitUsage;
  }
  if (!probe.ok) {
    if (opt.no_gpu) *opt.no_gpu = true;
    const std::string opens =
        opens_without_gpu(*task, config, solution, python ? shim : "", sandbox, opt, pins, log);
    if (opt.no_gpu_said)
      std::fprintf(stderr, "nibble grade: %s: %s\n", solution.c_str(), opens.c_str());
    else
      std::fprintf(stderr,
                   "nibble grade: no usable NVIDIA GPU, so nothing can be graded here.\n  %s\n  %s\n"
                   "  Run nibble grade on a machine with a CUDA GPU and driver; the tests (scripts/test.sh) run without one.\n",
                   probe.why.c_str(), opens.c_str());
    return kExitUsage;
  }
  const json& device = probe.device;
  report["device"] = device;
  for (const auto& [k, v] : device_choice.items()) report["device"][k] = v;
  report["device"]["at_start"] = device_at_start(device.value("uuid", ""));
  if (const json& others = report["device"]["at_start"].value("other_processes", json::array()); !others.empty()) {
    report["device"]["shared"] = true;
    std::fprintf(stderr, "nibble grade: warning: %zu other process(es) use this GPU (%s)%s\n", others.size(),
                 device.value("uuid", "?").c_str(),
                 opt.timing ? ": the timing shares the GPU with them (report: device.shared)" : "");
  }
  std::vector<SandboxLayer> layers = probe.layers;
  std::string layers_from = "the device probe's child (no candidate child reported its own)";

  // 2. Fixtures (the cache, when none was named).
  if (opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;
  report["fixtures"] = fixtures;

  json sol = {{"path", solution}, {"sha256", pins.sha256(solution)}}, ref = {{"path", reference}, {"sha256", pins.sha256(reference)}};
  if (python) sol["python_shim"] = {{"path", shim}, {"sha256", pins.sha256(shim)}};

  Evidence ev;
  ev.gate = task->gate(config);
  ev.element_guard = task->element_guard(config);
  ev.unit = task->unit() == "token" ? "step" : task->unit();
  ErrorTally tally, timed_tally;
  json per_seed = json::array(), wall = json::object(), timing, verified = json::array();
  Job base;
  base.task = task->name();
  base.config = config;
  base.checked_calls = task->checked_calls(config);
  base.check_seed = opt.timing_seed ? *opt.timing_seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  base.build_timeout_seconds = opt.build_timeout_seconds;
  base.call_timeout_seconds = opt.step_timeout_seconds;
  base.sandbox = sandbox;
  base.require_sandbox = opt.require_sandbox;

  // The candidate's job on seed `i`'s fixture. A Python solution: the shim loads it; its child may
  // start processes (Triton's ptxas) and writes only into a scratch folder of its own (`scratch`,
  // removed when the caller's goes).
  auto candidate_job = [&](size_t i, std::optional<PythonScratch>& scratch) {
    Job j = base;
    j.solution = solution;
    j.fixture_dir = fixture_dirs[i];
    if (python) make_python_job(j, shim, scratch);
    return j;
  };

  // 3. Per seed: the candidate, then the reference, each in its own process. The candidate runs
  // first: the reference's outputs do not exist while it (or anything it left running, which
  // run_child kills) could read them.
  for (size_t i = 0; i < opt.seeds.size(); ++i) {
    const uint64_t seed = opt.seeds[i];
    const bool timed = opt.timing && i == 0;
    std::optional<PythonScratch> scratch;
    Job cj = candidate_job(i, scratch);
    if (timed) {
      TimingJob tj;
      tj.calls_per_round = task->calls_per_round();
      tj.min_rounds = opt.min_rounds;
      tj.max_rounds = opt.max_rounds;
      tj.max_seconds = opt.max_timing_seconds;
      tj.clock = opt.clock;
      tj.graph_records = opt.graph_records;
      tj.seed = opt.timing_seed;
      tj.kept_per_round = task->kept_calls_per_round();
      tj.gpu_uuid = device.value("uuid", "");
      cj.timing = tj;
    }
    log("seed " + std::to_string(seed) + ": running the candidate" + (timed ? " (checked, then timed)" : ""));
    auto t0 = std::chrono::steady_clock::now();
    const ChildRun c = run_job_child(cj, opt.timeout_seconds, &log,
                                     timed ? "candidate: checked calls, then timing" : "candidate: checked calls", &pins);
    wall["candidate_seed" + std::to_string(seed)] = since(t0);
    // Nothing the candidate did: a binary changed before it ran, or the sandbox it must have failed.
    if (!c.refused.empty()) throw GraderError("the candidate was not started: " + c.refused);
    if (c.result && c.result->error && c.result->error->kind == "sandbox") throw GraderError(c.result->error->message);
    if (c.result && !c.result->sandbox.empty() && i == 0) {
      layers = c.result->sandbox;
      layers_from = "the candidate's child";
    }
    if (c.result) {
      sol["name"] = c.result->solution_name;
      sol["numerics"] = c.result->numerics;
      sol["facts"] = json(c.result->facts);
    }
    if (!c.completed()) {
      child_evidence(c, *task, &ev);
      if (!c.log_tail.empty()) sol["log_tail"] = c.log_tail;
    }
    // The candidate runs as this user and could rewrite the cached fixture so that the reference
    // computes from the same wrong inputs: the files are re-hashed against the manifest read
    // before it ran before the reference reads them.
    if (opt.verify_fixture) {
      t0 = std::chrono::steady_clock::now();
      ev.inputs_changed = fixture_changed(fixture_dirs[i], manifests[i]);
      wall["fixture_recheck_seed" + std::to_string(seed)] = since(t0);
      if (!ev.inputs_changed.empty()) {
        per_seed.push_back({{"seed", seed}});
        break;
      }
    }
    const bool have_timing = timed && c.result && c.result->timing && c.ledger;
    // Nothing to compare (the candidate ended before its checked calls did): its verdict needs no
    // reference, and a GPU it left broken must not turn into a failure of the grader.
    const bool have_outputs = c.result && c.result->checked_calls_done == base.checked_calls;
    if (!have_outputs) {
      per_seed.push_back({{"seed", seed}});
      break;
    }
    Job rj = base;
    rj.solution = reference;
    rj.fixture_dir = fixture_dirs[i];
    const std::string replay_refused = have_timing ? replay_error(*task, config, c.result->replay, *c.ledger) : "";
    if (have_timing && replay_refused.empty()) rj.replay = c.result->replay;
    log("seed " + std::to_string(seed) + ": running the reference" + (have_timing ? " (and the kept timed calls)" : ""));
    t0 = std::chrono::steady_clock::now();
    const ChildRun r = run_job_child(rj, opt.timeout_seconds, &log, "reference", &pins);
    wall["reference_seed" + std::to_string(seed)] = since(t0);
    if (!r.refused.empty()) {  // changed while the candidate ran (it runs as this user): not judged on it
      ev.inputs_changed = r.refused + ", after the candidate ran; the reference was not run on it";
      per_seed.push_back({{"seed", seed}});
      break;
    }
    if (!r.completed())
      throw GraderError("the reference failed on seed " + std::to_string(seed) + "; the grader cannot judge without it: " +
                        r.describe_failure());
    ref["name"] = r.result->solution_name;
    ref["numerics"] = r.result->numerics;
    if (!opt.dump_dir.empty()) {
      fs::create_directories(opt.dump_dir);  // checked up front, created only now that there is something to dump
      for (const auto& [who, ch] : {std::pair<const char*, const Channel*>{"reference", r.outputs.get()}, {"candidate", c.outputs.get()}})
        if (!ch->empty())
          write_file_atomic(opt.dump_dir + "/seed" + std::to_string(seed) + "-" + who + ".safetensors", read_channel(ch->fd()));
    }
    json seed_j = {{"seed", seed}};
    std::string digest_refused;  // kept outputs unlike what their "done" committed: computed after the window
    {
      ErrorTally seed_tally;
      try {
        const SafetensorsFile cf(c.outputs->path()), rf(r.outputs->path());
        seed_j["calls"] = compare_outputs(cf, rf, "call", seed_tally);
        tally.merge(seed_tally);
        ev.compared = true;
        if (have_timing && replay_refused.empty()) {  // an empty or missing channel is unreadable outputs, never "nothing to check"
          const SafetensorsFile tf(c.timed_outputs->path());
          check_kept_calls(tf, rf, *c.ledger);
          digest_refused = kept_digest_error(*task, tf, *c.ledger, c.result->facts);
          for (auto& v : compare_outputs(tf, rf, "timed", timed_tally)) verified.push_back(v);
          if (verified.empty()) throw std::runtime_error("no timed call was re-checked against the reference");
        }
      } catch (const std::exception& e) {
        ev.compare_error = std::string("the candidate's outputs could not be read: ") + e.what();
      }
      seed_j["worst_rel_err"] = num_or_null(seed_tally.worst);
    }
    if (have_timing) {
      timing = timing_section(*task, config, *c.result->timing, *c.ledger, device, c.result->facts, opt.clock, &ev);
      timing["graph_records"] = opt.graph_records;
      ev.graphs_recorded_whole = opt.graph_records == "graphs";
      // A replay spec the ledger's picks or seeds refute, or kept outputs unlike their commitment,
      // is a tampered record of the timed calls: InvalidTiming.
      for (const std::string& why : {digest_refused, replay_refused})
        if (!why.empty()) ev.ledger_violation = why + (ev.ledger_violation.empty() ? "" : "; " + ev.ledger_violation);
    } else if (timed && c.completed()) {
      // Timing was asked for and the child says it is done, without it (a result rewritten in the
      // child): no timed call on record, never a grade without the timing rules.
      ev.timed = true;
      ev.samples = 0;
      if (c.ledger) ev.ledger_violation = c.ledger->violation();
    }
    per_seed.push_back(seed_j);
    if (!c.completed()) break;
  }

  // 4. The evidence, the verdict, the report.
  const bool timed_worse = timed_tally.compared > 0 && (std::isnan(timed_tally.worst) || timed_tally.worst > tally.worst);
  ev.worst_rel_err = timed_worse ? timed_tally.worst : tally.worst;
  ev.worst_elem_err = std::isnan(timed_tally.worst_elem) ? NAN : std::max(tally.worst_elem, timed_tally.worst_elem);
  ev.worst_where = timed_worse ? "a timed call re-checked against the reference replaying its inputs: " + timed_tally.where()
                               : tally.where();
  const Verdict v = judge(ev);

  json correctness;
  correctness["gate"] = ev.gate;
  correctness["element_guard"] = ev.element_guard ? json(*ev.element_guard) : json(nullptr);
  correctness["metric"] = task->error_metric();
  correctness["checked_calls"] = base.checked_calls;
  correctness["per_seed"] = per_seed;
  ErrorTally all = tally;  // the checked calls and the re-checked timed ones: what the gate judged
  all.merge(timed_tally);
  correctness["worst_rel_err"] = num_or_null(all.worst);
  json by_output = json::object();
  for (const auto& [name, e] : all.by_output) by_output[name] = num_or_null(e);
  correctness["worst_by_output"] = by_output;
  correctness["worst_elem_err"] = num_or_null(ev.worst_elem_err);
  correctness["ratio_to_gate"] = num_or_null(all.worst / ev.gate);
  correctness["verdict"] = !ev.compared ? "not run" : all.worst < ev.gate ? "pass" : "fail";
  const json cal = calibration_context(opt.calibration.empty() ? committed_calibration(task->name(), config) : opt.calibration,
                                       all.worst);
  if (!cal.is_null()) correctness["calibration"] = cal;

  report["solution"] = sol;
  report["reference"] = ref;
  report["sandbox"] = sandbox_section(layers, layers_from, opt.require_sandbox, pins);
  report["correctness"] = correctness;
  if (timing.is_object()) {
    timing["verified_calls"] = verified;
    timing["verified_worst_rel_err"] = num_or_null(timed_tally.worst);
    report["timing"] = timing;
  }
  const bool by_wall = opt.clock == "wall";
  json timing_protocol = {
      {"metric", by_wall ? "the grader's clock (--clock wall): each timed call's window as the call ledger stamped it, less the "
                        "ledger's credited overhead, never below the call's GPU span (first CUPTI record's start to the "
                        "last one's end, reported beside it)"
                      : "GPU span: first CUPTI activity record's start to the last one's end (CONCURRENT_KERNEL, MEMCPY, "
                        "MEMSET; all streams), per timed call"},
      {"before_each_call", "inputs staged, persisting L2 reset, L2 flushed (2x its size written), device synchronised; outside the window"},
      {"after_each_call", "device synchronised inside the window; a kernel still running after it (CUPTI delivers it only at a later collect) makes the grade InvalidTiming"},
      {"between_calls", "any GPU record (kernel, memcpy, memset) between two timed calls on a stream other than the harness's own, beyond what the harness leaves there (counted before the build), makes the grade InvalidTiming"},
      {"rounds", std::string("calls_per_round calls per round; stop when the median ") +
                     (by_wall ? "wall time" : "GPU span") +
                     " moves less than 0.5% between rounds (after min rounds), at max rounds or the time budget; rounds "
                     "NVML saw throttled are left out of the median while any other is left"},
      {"rechecked", "kept_per_round calls of every round, picked by the grader's parent process after each call returned (the call ledger); every kept call is recomputed by the reference and audited (inputs, caches beyond the written slots)"},
      {"grader_clock", std::string("the kernel stamps each call's open and done messages as the child sends them, and the "
                                   "parent reads the stamps (the call ledger): ") +
                           (by_wall ? "the windows are the figure; a span longer than the window makes the grade InvalidTiming"
                                 : "median window - ledger overhead - GPU span above 100 us x the host's slowdown (timing.ledger.host_slowdown) + 10% of the span, or a span "
                                   "longer than the window, makes the grade InvalidTiming") +
                           "; each call's GPU span is committed to the parent as the call closes, and a result that reports "
                           "another makes the grade InvalidTiming"},
      {"timed_seed", opt.seeds.front()}};
  const json task_protocol = task->timing_protocol();
  for (const auto& [k, val] : task_protocol.items()) timing_protocol[k] = val;
  report["protocol"] = {{"parent_child", kProtocolVersion},
                        {"channels", "job, result and outputs in memory files the parent created (memfd), passed as descriptors"},
                        {"timing", timing_protocol},
                        {"timing_seed", opt.timing_seed ? json(*opt.timing_seed) : json(nullptr)}};
  report["disposition"] = to_string(v.disposition);
  report["rule"] = to_string(v.rule);
  report["reason"] = v.reason;
  report["findings"] = v.findings;
  wall["total"] = since(t_start);
  report["wall_seconds"] = wall;

  // 5. A profiler's run, after the verdict (profile.h), before anything is written: the profiled
  // run goes without Landlock, and nothing the grade writes exists for it to alter.
  if (!opt.profile.empty()) {
    if (v.disposition != Disposition::Passed) {
      report["profile"] = {{"tool", opt.profile},
                           {"status", "not run: only a Passed solution is profiled (its profiled run is less sandboxed, profile.h)"}};
    } else {
      // Whatever goes wrong here is the profile's, never the verdict's (already made).
      try {
        std::optional<PythonScratch> scratch;
        report["profile"] = profile_section(opt, candidate_job(0, scratch), pins, log);
      } catch (const std::exception& e) {
        report["profile"] = {{"tool", opt.profile}, {"status", std::string("failed: ") + e.what()}};
      }
    }
  }

  try {
    write_file_atomic(opt.out, json_text(report, 2) + "\n");
    if (!opt.gbench_json.empty())
      write_file_atomic(opt.gbench_json, json_text(gbench_json(report), 2) + "\n");
    if (!opt.history.empty()) append_history(opt.history, report, opt.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitGraderFailed;
  }

  // 6. The summary a person reads (the same text `nibble report show` prints from the JSON).
  summary_stream(opt.out) << format_summary(graded_report_view(report), opt.out) << std::flush;
  return v.disposition == Disposition::Passed ? kExitPassed : kExitNotPassed;
}

}  // namespace

int grade_main(const GradeOptions& opt) {
  // Whatever a candidate did, it is a disposition inside grade_run; what is left here is a failure
  // of the grader itself (its temporary folder is gone by now, RAII): it still leaves a report that
  // says so, for a CI job that reads the report before the exit status.
  try {
    return grade_run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: the grader failed: %s\n", e.what());
    try {
      json report = document_header("nibble.report", opt.argv, opt.task, opt.config);
      report["schema_version"] = kReportSchemaVersion;
      report["seeds"] = opt.seeds;
      report["solution"] = {{"path", opt.solution}};  // no sha256: what failed may be the reading of it
      report["correctness"] = json::object();
      report["protocol"] = {{"parent_child", kProtocolVersion}};
      report["disposition"] = kGraderFailedDisposition;
      report["rule"] = "grader";
      report["reason"] = std::string("the grader itself failed, not the candidate: ") + e.what();
      write_file_atomic(opt.out, json_text(report, 2) + "\n");
    } catch (const std::exception& w) {
      std::fprintf(stderr, "nibble grade: no report could be written either: %s\n", w.what());
    }
    return kExitGraderFailed;
  }
}

int grade_lineup_main(const GradeOptions& opt, const std::vector<std::string>& solutions) {
  if (solutions.size() < 2) {
    GradeOptions one = opt;
    one.solution = solutions.empty() ? opt.solution : solutions.front();
    return grade_main(one);
  }
  const std::string dir = opt.out.empty() ? "nibble-reports" : opt.out;
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "nibble grade: %s\n", why.c_str());
    return int(kExitUsage);
  };
  if (std::filesystem::path(dir).extension() == ".json")
    return refuse("with several --solution, --out names a folder for their reports (default nibble-reports), not the file " + dir);
  if (!opt.dump_dir.empty() || !opt.gbench_json.empty())
    return refuse("--dump and --gbench-json name one solution's files: grade that solution alone to write them");
  // A profiled run goes without Landlock (profile.h): it could rewrite the reports of the solutions
  // graded before it in this folder, which the side by side reads.
  if (!opt.profile.empty()) return refuse("--profile goes with one solution: grade the solution you want profiled alone");
  for (const std::string& s : solutions) {  // every one before the first grade: a typo costs no grading
    try {
      check_solution_file(s);
    } catch (const std::exception& e) {
      return refuse(e.what());
    }
  }
  std::error_code ec;
  const bool made_dir = !std::filesystem::exists(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) return refuse("--out " + dir + " cannot be made a folder (" + ec.message() + ")");
  try {  // before any grade: a folder that takes no file would fail every one of them
    check_writable((std::filesystem::path(dir) / "lineup.json").string());
  } catch (const std::exception& e) {
    return refuse("--out " + dir + " takes no file (" + std::string(e.what()) + "); choose another folder");
  }

  // One report per solution, named after its file; the fixtures are the cache's, built (and
  // checked) by the first grade and checked again by each one after it.
  std::vector<std::string> reports;
  std::vector<bool> fresh;  // per report: written by this run's grade (else absent, or an earlier run's)
  std::set<std::string> taken = {"lineup"};  // the side by side's own files
  int worst = kExitPassed;
  auto severity = [](int code) { return code == kExitGraderFailed ? 3 : code == kExitUsage ? 2 : code == kExitNotPassed ? 1 : 0; };
  bool no_gpu_seen = false;  // the first grade found no usable GPU (the rest only say whether they open)
  for (const std::string& solution : solutions) {
    std::string stem = std::filesystem::path(solution).stem().string();
    if (stem.empty()) stem = "solution";
    std::string name = stem;
    for (int k = 2; taken.count(name); ++k) name = stem + "-" + std::to_string(k);
    taken.insert(name);
    GradeOptions one = opt;
    one.solution = solution;
    one.out = (std::filesystem::path(dir) / (name + ".json")).string();
    if (!opt.quiet) std::fprintf(stderr, "\n== nibble grade: %s -> %s\n", solution.c_str(), one.out.c_str());
    // A report left there by an earlier run must not stand for this grade if it writes none; it is
    // kept (nothing graded here replaces it) and the side by side shows the grade as NoReport.
    const FileStamp before = file_stamp(one.out);
    bool no_gpu = false;
    one.no_gpu = &no_gpu;
    one.no_gpu_said = no_gpu_seen;
    const int code = grade_main(one);
    if (severity(code) > severity(worst)) worst = code;
    reports.push_back(one.out);
    const FileStamp after = file_stamp(one.out);
    fresh.push_back(after.exists && !(after == before));
    // Every other grade stops at the same probe: each still says whether its solution opens here (a
    // submission's load error shows on any machine), and nothing is graded or touched.
    no_gpu_seen = no_gpu_seen || no_gpu;
  }
  if (no_gpu_seen) {
    std::fprintf(stderr, "nibble grade: no usable GPU: none of the %zu solutions is graded; no lineup\n", solutions.size());
    std::error_code left;
    if (made_dir && std::filesystem::is_empty(dir, left)) std::filesystem::remove(dir, left);
    return int(kExitUsage);
  }

  // Side by side: every report that exists, in the order given; a grade that left none is a row.
  std::vector<ReportView> views;
  std::vector<std::string> labels;
  std::string gpu;
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string& r = reports[i];
    try {
      if (!fresh[i])
        throw BadReport(std::filesystem::exists(r) ? r + " is an earlier run's report, left as it was" : "no file " + r);
      views.push_back(load_report_view(r));
      if (gpu.empty()) gpu = views.back().device_name;
    } catch (const BadReport& e) {
      ReportView none;
      none.schema_major = 2;
      none.task = opt.task;
      none.config = opt.config;
      none.solution_name = std::filesystem::path(r).stem().string();
      none.disposition = "NoReport";
      none.reason = std::string("the grade left no readable report (its messages above say why): ") + e.what();
      views.push_back(none);
    }
    labels.push_back(r);
  }
  // No grade wrote a report (no GPU here, every solution refused before it ran): nothing to put
  // side by side, and an earlier run's lineup files there would stand for this one.
  if (std::all_of(views.begin(), views.end(), [](const ReportView& v) { return v.disposition == "NoReport"; })) {
    for (const char* f : {"lineup.txt", "lineup.json", "lineup.html"}) {
      std::error_code gone;
      std::filesystem::remove(std::filesystem::path(dir) / f, gone);
    }
    std::fprintf(stderr, "nibble grade: none of the %zu grades wrote a report (their messages above say why): no lineup\n",
                 views.size());
    return worst;
  }
  for (ReportView& v : views)
    if (v.disposition == "NoReport") v.device_name = gpu;
  const std::vector<LineupRow> rows = make_lineup(views, labels);
  const std::string table = format_lineup(rows);
  std::printf("\n%s", table.c_str());
  std::string written;
  const std::string html = (std::filesystem::path(dir) / "lineup.html").string();
  try {
    write_file_atomic((std::filesystem::path(dir) / "lineup.txt").string(), table);
    write_file_atomic((std::filesystem::path(dir) / "lineup.json").string(), json_text(lineup_json(rows), 2) + "\n");
    written = "lineup.txt, lineup.json";
    if (views.front().disposition != "NoReport") {
      HtmlAnchors anchors{task_error_anchors(views.front().task, views.front().config),
                          std::vector<ReportView>(views.begin() + 1, views.end()), std::vector<std::string>(labels.begin() + 1, labels.end())};
      write_file_atomic(html, render_html_report(views.front(), labels.front(), anchors));
      written += " and lineup.html (the first solution's page, the others beside it)";
    } else {
      std::error_code gone;
      std::filesystem::remove(html, gone);  // an earlier run's page would show other reports
      written += " (no lineup.html: the first solution has no report)";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: the side-by-side files could not be written: %s\n", e.what());
    if (severity(kExitGraderFailed) > severity(worst)) worst = kExitGraderFailed;
  }
  if (!written.empty()) std::printf("  %s in %s\n", written.c_str(), dir.c_str());
  return worst;
}

}  // namespace nibble
