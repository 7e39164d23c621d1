// grade_common.h: pieces the parent-side commands (grade, calibrate) share: child runs, fixtures,
// output comparison, formatting. Internal to harness/.
#pragma once

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "fixtures/task.h"
#include "harness/process.h"

namespace nibble {

using ordered_json = nlohmann::ordered_json;

/** Seconds since t0. */
double since(std::chrono::steady_clock::time_point t0);

/** Progress lines on stderr, unless quiet. */
struct Log {
  bool quiet;
  /** A line; ends a pending progress line first. */
  void operator()(const std::string& msg) const {
    if (quiet) return;
    if (progress_open) std::fprintf(stderr, "\n");
    progress_open = false;
    std::fprintf(stderr, "[nibble] %s\n", msg.c_str());
  }
  /** A progress line rewritten in place: only on a terminal, never with --quiet. */
  void progress(const std::string& line) const {
    if (quiet || !tty) return;
    std::fprintf(stderr, "\r[nibble]   %-60s", line.c_str());
    std::fflush(stderr);
    progress_open = true;
  }
  bool tty = false;
  mutable bool progress_open = false;
};

/** A child's end plus the result.json it left (null when it left none). */
struct ChildRun {
  ChildExit exit;
  ordered_json result;
  std::string log_tail;
  bool completed() const { return exit.kind == ChildExit::Exited && exit.code == 0 && result.value("phase", "") == "done"; }
};

/** Run one child with its own folder (log.txt, result.json) and a watchdog of `timeout` seconds. */
ChildRun run_child_in(const std::vector<std::string>& argv, const std::string& dir, double timeout,
                      const Log* log = nullptr, const std::string& what = "");

/** Disposition and reason for a candidate child that did not complete. */
std::pair<std::string, std::string> failure_disposition(const ChildRun& c);

/** The fixture for (config, seed): `given_dir`, or the cache (built when missing); verified by
 *  SHA-256 when `verify`. Returns the report's fixture entry; *dir_out gets the folder.
 *  Throws std::invalid_argument for bad input (wrong fixture, other generator version). */
ordered_json ensure_fixture(const DecodeConfig& cfg, uint64_t seed, const std::string& given_dir, int threads, bool verify,
                            const Log& log, std::string* dir_out);

/** Per-step errors of a candidate's checked outputs against the reference's (fp64): logits and
 *  appended K/V. *worst gets the worst of both (NaN if any is NaN); *all_finite_out is cleared on
 *  a non-finite logit. */
ordered_json compare_outputs(const DecodeConfig& cfg, const std::string& ref_file, const std::string& cand_file,
                             double* worst, bool* all_finite_out, double* worst_logits = nullptr,
                             double* worst_kv = nullptr);

/** The provenance every nibble JSON document opens with (after nvbench's json_printer): schema
 *  and version, nibble version, UTC time, argv, git commit and dirty flag, host, task, config. */
ordered_json document_header(const std::string& schema, const std::vector<std::string>& argv, const std::string& task,
                             const std::string& config);

/** The bundled reference next to the nibble executable (<bin>/../lib), unless `given` names one. */
std::string bundled_reference(const std::string& exe, const std::string& given);

/** Throws std::invalid_argument unless `path` exists and starts with an ELF header (checked
 *  without loading it: the parent never dlopens a candidate). */
void check_solution_file(const std::string& path);

/** Throws std::runtime_error unless a file can be written atomically at `path`. */
void check_writable(const std::string& path);

/** Throws std::invalid_argument unless `seeds` is non-empty and has no seed twice. */
void check_seeds(const std::vector<uint64_t>& seeds);

/** What can be wrong with a calibration's options beyond its task and config, checked before any
 *  work (both task families): seeds present and distinct, --path gpu, cpu or auto, the table
 *  writable. Throws std::invalid_argument with the message for the user. */
struct CalibrateOptions;
void check_calibrate_options(const CalibrateOptions& opt);

/** Calibration's path for `want` ("gpu", "cpu" or "auto", as check_calibrate_options allows):
 *  "gpu" when the probe child (run in work_dir) finds a GPU, with its facts in *device; "cpu" for
 *  want "cpu" or for "auto" without a GPU; "" after printing why when want is "gpu" and no GPU
 *  answers (exit 2). Shared by the decode and GEMM calibrations. */
std::string calibration_path(const std::string& want, const std::string& exe, const std::string& work_dir, const Log& log,
                             ordered_json* device);

/** The child arguments of one reference run: variant ("" = the exact reference), output folder. */
using VariantArgs = std::function<std::vector<std::string>(const std::string& variant, const std::string& out_dir)>;

/** Calibration's GPU runs of one seed, each in a child process under seed_dir: the exact reference
 *  (seed_dir/exact), then every name in `variants` (seed_dir/<name>), calling compare(i, variant
 *  folder, exact folder) after variant i (it may throw: the caller reports it). Returns false after
 *  printing why when a child fails. */
bool run_variant_children(const VariantArgs& args, const std::vector<std::string>& variants, const std::string& seed_dir,
                          double timeout_seconds, const Log& log,
                          const std::function<void(size_t, const std::string&, const std::string&)>& compare);

/** Everything about a grade's options that can be wrong, checked before any work (both task
 *  families): the solution file, seeds (present, distinct, one with --fixture), report,
 *  --gbench-json and --history writable, --dump a folder, rounds and timeouts sane. Throws
 *  std::invalid_argument with the message for the user. */
struct GradeOptions;
void check_grade_options(const GradeOptions& opt);

/** The grade's fixture stage: each(seed) for every seed; an exception is bad input (a missing,
 *  wrong or corrupt fixture, its message naming the tensor and the rebuild command), printed as
 *  "nibble grade: fixture: ..." and answered 2 (GradeExit's kExitUsage); else 0. */
template <class F>
int fixture_stage(const std::vector<uint64_t>& seeds, F&& each) {
  try {
    for (uint64_t seed : seeds) each(seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: fixture: %s\n", e.what());
    return 2;
  }
  return 0;
}

/** The committed calibration table a decode grade of (task, config) shows its place in when no
 *  --calibration is given: reports/<gpu>/calibration-<config>.json of the source tree, the last
 *  of this task and config in folder order; "" when there is none. */
std::string committed_calibration(const std::string& task, const std::string& config);

/** --calibration FILE: a readable `nibble calibrate` table (schema "nibble.calibration", rows) of
 *  this task and config; std::invalid_argument naming what is wrong otherwise. */
void check_calibration_file(const std::string& path, const std::string& task, const std::string& config);

/** Where a command's human summary goes: stderr when its JSON output `out` is this process's
 *  stdout (--out /dev/stdout: the JSON alone on stdout, for a pipe), else stdout. */
std::ostream& summary_stream(const std::string& out);

/** printf("%.*g"). */
std::string fmt(double v, int prec = 3);
/** Current UTC time, ISO 8601. */
std::string utc_now();

}  // namespace nibble
