// gemm_grade.h: grading, calibration and the child runner of the FP4 dequant-GEMM tasks
// (gemm-w4a16-nvfp4, gemm-bf16-mxfp4; include/nibble/nibble_gemm.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "harness/calibrate.h"
#include "harness/grade.h"

namespace nibble {

/** The gate of both GEMM tasks: worst relative Frobenius error of C. Chosen from the fp64 oracle's
 *  variant table (must-pass bf16 dequant 2.4e-3 NVFP4 / 1.7e-3 MXFP4; the closest must-fail,
 *  subnormals decoded as normals, 3.1e-2 / 4.3e-2): half-gate and twice-gate margins both hold at
 *  1e-2. `nibble calibrate` re-measures it. */
inline constexpr double kGemmGate = 1e-2;

struct GemmRunOptions {
  std::string solution, fixture_dir, task, config, out_dir, variant;
  int checked_calls = 2;       // call 0 with the fixture's A, then A with a fresh sign mask per call
  int64_t extra_call = -1;     // >= 0: also run this call number with extra_seed's mask, stored as
  uint64_t extra_seed = 0;     // "timed" (the reference, for the call the candidate kept)
  bool timing = false;
  uint64_t timing_seed = 0;    // seeds the sign masks of A in the checked calls after the first
  // Seeds the timed calls' masks and which call each round keeps, when given (nibble grade
  // --timing-seed: reproducible); else each is drawn from the OS when needed, after prepare
  // (TimedRandom), so that a candidate can neither read them off its command line nor predict
  // one call's mask from another's.
  std::optional<uint64_t> timed_seed;
  int calls_per_round = 32, min_rounds = 3, max_rounds = 20;
  double max_timing_seconds = 60;
  double prepare_timeout_seconds = 600, call_timeout_seconds = 20;
};

/** `nibble __run-gemm`: one GEMM solution in this process; result.json + outputs.safetensors. */
int child_gemm_main(const GemmRunOptions& opt);
/** `nibble grade` for a GEMM task (GradeOptions.task names it). Same exit codes as grade_main. */
int grade_gemm_main(const GradeOptions& opt);
/** `nibble calibrate` for a GEMM task: the variant table against kGemmGate, on the GPU (the GEMM
 *  reference .so and each variant in child processes) or the fp64 oracle (path cpu, or auto without
 *  a GPU). Exit codes as calibrate_main: 0 healthy, 1 not, 2 bad input or no GPU for path gpu,
 *  3 could not run. */
int calibrate_gemm_main(const CalibrateOptions& opt);

}  // namespace nibble
