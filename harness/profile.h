// profile.h: `nibble grade --profile ncu|nsys`, a profiler's run after the graded one.
//
// CUPTI has one subscriber: the graded run's timer. So the profiler gets a run of its own, after the
// verdict: a child that builds the solution, makes its checked calls, then kProfileCalls calls of
// the timed entry point, each inside an NVTX range named kProfileRange, with no CUPTI of its own.
// Nsight Compute (ncu, --clock-control none, kernels inside that range only) or Nsight Systems
// (nsys, CUDA and NVTX traces) runs that child; the profile is stored next to the report and a few
// figures of the top kernels go into the report's "profile" section. The profiled child runs
// without the sandbox's namespaces and Landlock (the profiler talks to its target over localhost
// TCP and writes its own files; seccomp stays), so only a Passed solution is profiled and
// --require-sandbox refuses --profile; it decides nothing: the verdict is already made. Without
// the profiler the section says so, and the grade is done as without --profile.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nibble {

inline constexpr const char* kProfileRange = "nibble_call";
inline constexpr int kProfileCalls = 8;
/** Kernels the report lists, by total GPU time. */
inline constexpr int kProfileTopKernels = 5;

/** "ncu" and "nsys": what --profile accepts. Throws std::invalid_argument naming them otherwise. */
void check_profiler(const std::string& tool);

/** The profiler's executable: on PATH, else in $CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin;
 *  "" when there is none. */
std::string find_profiler(const std::string& tool);

/** Where the profile of a report at `report_path` is stored: <report without .json>.ncu-rep
 *  (ncu) or .nsys-rep (nsys). */
std::string profile_path(const std::string& tool, const std::string& report_path);

/** The argv prefix that runs a child under `exe` (the profiler) and stores profile_path(). */
std::vector<std::string> profiler_run_argv(const std::string& tool, const std::string& exe, const std::string& report_path);

/** The argv that prints the stored profile's per-kernel figures as CSV on stdout. */
std::vector<std::string> profiler_export_argv(const std::string& tool, const std::string& exe, const std::string& report_path);

/** One CSV record (RFC 4180: fields in double quotes may hold commas and "" for a quote). */
std::vector<std::string> split_csv_record(const std::string& line);

/**
 * The top kernels by total GPU time from the export's output (lines that are not CSV records, the
 * profiler's own messages, are skipped): [{name, launches, total_us, mean_us} + for ncu
 * dram_throughput_pct, achieved_occupancy_pct, registers_per_thread (means over the launches)].
 * Throws std::runtime_error when the output has no table it knows.
 */
nlohmann::ordered_json profile_top_kernels(const std::string& tool, const std::string& csv, int top = kProfileTopKernels);

}  // namespace nibble
