// child.h: what runs inside the grader's child processes.
//
// The parent never loads a candidate: `nibble __run` opens one solution (candidate, reference or
// variant alike) in a fresh process, runs the checked steps and, for a candidate, the timed
// steps, and leaves result.json (+ outputs.safetensors) in its output folder. `nibble __probe`
// reads the device's facts and measures its copy bandwidth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nibble {

struct RunOptions {
  std::string solution;     // .so path
  std::string fixture_dir;  // holds model.safetensors
  std::string config;       // "full" | "tiny"
  std::string out_dir;      // result.json, outputs.safetensors
  int checked_steps = 8;    // consecutive steps from pos = prefill, outputs saved
  bool timing = false;
  // Seeds the timed calls' token ids when given (nibble grade --timing-seed: reproducible); else
  // every id is drawn from the OS when it is needed (TimedRandom), after build_model, so that a
  // candidate can neither read the ids off its command line nor predict them from earlier ones.
  std::optional<uint64_t> timing_seed;
  int steps_per_round = 32;     // one round = the seed's 32 decode steps from pos = prefill
  int min_rounds = 3, max_rounds = 20;
  double max_timing_seconds = 120;
  double stable_fraction = 0.005;  // stop once the median moves less than this between rounds
  double build_timeout_seconds = 600;  // watchdog of build_model and teardown
  double step_timeout_seconds = 20;    // watchdog of one decode_step plus the device sync after it
  std::string replay_file;
  std::string variant;      // calls nibble_reference_set_variant(variant) before build_model  // JSON {"tokens": [...], "keep_steps": [...]}: replay instead of checked steps
};

/** Child entry points; return the process exit code (0 = completed; result.json says more). */
int child_run_main(const RunOptions& opt);
/** `nibble __probe`: device facts, the 1 GiB copy bandwidth (measure_bandwidth) and, when
 *  read_floor_bytes > 0, the weight-read floor: the CUPTI span of launch_read_stream over that many
 *  bytes after the grader's L2 flush, 50 times after 3 warm-ups at each of three grid shapes, the
 *  fastest median (result "read_floor", us). */
int child_probe_main(const std::string& out_file, bool measure_bandwidth, size_t read_floor_bytes = 0);

/** result.json's "error.kind" values. */
inline constexpr const char* kErrLoad = "load";          // SolutionLibrary refused the .so
inline constexpr const char* kErrSolution = "solution";  // an entry point returned an error status
inline constexpr const char* kErrCuda = "cuda";          // a CUDA error surfaced after a solution call
inline constexpr const char* kErrHarness = "harness";    // fixture unreadable, out of memory, ...
inline constexpr const char* kErrTimeout = "timeout";    // the watchdog ended a call
inline constexpr const char* kErrInputModified = "input_modified";  // a read-only input changed

}  // namespace nibble
