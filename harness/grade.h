// grade.h: `nibble grade`: verify a candidate against the reference, time it, write the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/protocol.h"

namespace nibble {

/** Exit codes of `nibble grade` (also in the README). */
enum GradeExit : int {
  kExitPassed = 0,        // graded: disposition Passed
  kExitNotPassed = 1,     // graded: any other disposition (the report says which and why)
  kExitUsage = 2,         // bad arguments or input, or no GPU: nothing was graded
  kExitGraderFailed = 3,  // the grader itself could not finish (reference failed, I/O error)
};

struct GradeOptions {
  std::string task;    // default: the registry's first task (main.cpp)
  std::string config;  // default: the task's default config
  std::string solution;
  std::string reference;             // default: <dir of nibble>/../lib/libnibble_reference.so
  std::vector<uint64_t> seeds{0, 1};
  std::string fixture_dir;           // one seed only; default: the fixture cache, built if missing
  std::string out = "nibble-report.json";
  std::string dump_dir;              // reference and candidate outputs of every checked step
  std::string gbench_json;           // also write the timing in Google Benchmark's JSON format
  std::string history;               // append one JSON line per grade
  std::string calibration;           // calibrate JSON for the report's context (default: reports/*/calibration-<config>.json)
  double timeout_seconds = 900;      // per child process
  double step_timeout_seconds = 20;  // per decode_step call, in the child
  double build_timeout_seconds = 600;
  bool timing = true;
  std::optional<uint64_t> timing_seed;  // default: drawn from the OS, recorded in the report
  int min_rounds = 3, max_rounds = 20;
  double max_timing_seconds = 120;
  bool verify_fixture = true;
  bool require_sandbox = false;      // refuse to grade unless every layer of the child's sandbox is in force
  std::string profile;               // "ncu" or "nsys": a profiler's run after the graded one (profile.h); "" none
  std::string clock = "span";        // the figure of merit: "span" (CUPTI's GPU span) or "wall" (the grader's clock)
  std::string graph_records = kDefaultGraphRecords;  // how a CUDA graph's launch is recorded (protocol.h): "nodes" or "graphs"
  int device = -1;                   // --device N: GPU N of this host (select_device); -1: CUDA's first
  int threads = 0;                   // fixture build threads (0 = all cores)
  bool quiet = false;
  std::vector<std::string> argv;     // recorded in the report
  bool* no_gpu = nullptr;            // when set: true after the device probe found no usable GPU (lineup)
  bool no_gpu_said = false;          // an earlier solution's grade said there is no GPU: say only whether this one opens
};

/** Runs the whole grade; returns a GradeExit. Never throws for anything a candidate does. */
int grade_main(const GradeOptions& opt);

/**
 * Several solutions in one invocation (`nibble grade --solution A --solution B ...`): each graded by
 * grade_main on the same task, config, seeds and fixtures, in the order given; `opt.out` names a
 * folder (default nibble-reports) that gets one report per solution (<file stem>.json, -2, -3 ... on
 * a clash) and the side by side (harness/lineup.h): lineup.txt (also printed), lineup.json, and
 * lineup.html (the first solution's page with the others beside it). With one solution it is
 * grade_main. Returns the worst GradeExit of the grades (3 > 2 > 1 > 0); 2 before any grade when
 * `opt.out` ends in .json or --dump / --gbench-json are given (they name one solution's files), and
 * 2 after the first grade when it found no usable GPU (the others would stop the same way; a folder
 * this call made is removed again when nothing was written into it).
 */
int grade_lineup_main(const GradeOptions& opt, const std::vector<std::string>& solutions);

/** The schema_version of the reports grade writes (docs/report-schema.md). */
inline constexpr const char* kReportSchemaVersion = "2.9.0";

}  // namespace nibble
