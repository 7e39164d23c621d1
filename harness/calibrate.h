// calibrate.h: `nibble calibrate`: the drop-the-feature table, measured on nibble's own fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

struct CalibrateOptions {
  std::string task;    // default: the registry's first task (main.cpp)
  std::string config;  // default: the task's default config
  std::vector<uint64_t> seeds{0, 1};
  std::string fixture_dir;  // one seed only (an imported fixture, say); default: the cache
  std::string out = "nibble-calibration.json";
  std::string reference;     // default: the bundled reference .so
  std::string path = "auto"; // "gpu" (the reference .so and its variants, in child processes),
                             // "cpu" (the fp64 oracle and its variants, in this process), "auto"
  int threads = 0;
  double timeout_seconds = 900;
  int device = -1;  // --device N (grade_common.h select_device); -1: CUDA's first
  bool quiet = false;
  std::vector<std::string> argv;
};

/** Most fp64 multiply-adds `calibrate --path auto` runs on the CPU when no GPU answers (all
 *  variants and seeds; minutes at most): GEMM m16-n3072-k3072's 7 variants are 1e9 (a minute or
 *  two); the decode task's tiny config ~1e8, its full config ~7e11 (hours). */
constexpr double kAutoCpuOracleMaxMacs = 2e10;

/** Whether calibrate must refuse the fp64 CPU oracle it fell back on: `path` is "cpu" because
 *  --path auto found no GPU, and `macs` (its multiply-adds, `breakdown` saying of what) is beyond
 *  kAutoCpuOracleMaxMacs. Prints why and what to do instead (a GPU, `instead` here, or --path cpu).
 *  With --path cpu given, never refuses, but prints what the run costs before it starts. */
bool refuse_slow_cpu_oracle(const CalibrateOptions& opt, const std::string& path, double macs, const std::string& breakdown,
                            const std::string& instead);

/**
 * Runs every variant of the reference on the fixtures and prints the table (variant, worst
 * relative error per seed, ratio to the gate, expected PASS/FAIL, verdict). Returns 0 when the
 * gate is healthy: every must-pass variant at or below half the gate and every must-fail one at or
 * above twice the gate; 1 when not; 2 for bad input or (path gpu) no GPU; 3 when it could not run.
 */
int calibrate_main(const CalibrateOptions& opt);

}  // namespace nibble
