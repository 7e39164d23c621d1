// batch.h: `nibble batch MANIFEST`: many grades (and calibrations) over every GPU of a host, or as a
// Slurm job array.
//
// The manifest (JSON) lists runs; each run is a command (grade, the default, or calibrate), a task,
// its configs, seeds and, for grade, the solutions: the jobs are their product. A job is one
// `nibble grade` (or `calibrate`) process with its report at <out>/<job id>.json (the id ends in a
// tag of the job's spec: manifests sharing a results folder share only identical jobs) and a sidecar
// <job id>.job.json recording the job's hash (its command line and the solution's SHA-256), so an
// interrupted batch resumes: a job whose report exists and whose sidecar has the same hash is done.
// On one host the jobs run one per GPU at a time (timings never share a GPU), fixtures built once
// before; under Slurm each array element runs one job (`--element I`) on the GPU Slurm gave it, and
// `--collect` reads the results folder. Slurm's own tools do the scheduling (sbatch, sacct): nibble
// writes the array script and reads what the elements left.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nibble {

/** One job of a manifest. */
struct BatchJob {
  int index = 0;              // position in the manifest's product (the Slurm array index)
  int run = 0;                // which of the manifest's "runs" it comes from
  std::string id;             // file-name-safe: command-task-config-solution-s<seeds>-<8 hex of the spec>
  std::string command;        // "grade" or "calibrate"
  std::string task, config;
  std::vector<uint64_t> seeds;
  std::string solution;       // absolute path ("" for calibrate)
  std::string solution_sha256;  // of the solution's bytes, as its report records them ("" for calibrate)
  std::vector<std::string> args;  // more arguments, from the manifest
  bool needs_gpu = true;      // false: a calibrate with --path cpu
  std::string report, sidecar, log;  // absolute paths under the results folder
  std::string hash;           // SHA-256 of the job's spec and the solution's bytes (resume)
};

/** A manifest read and expanded. */
struct BatchManifest {
  std::string path, name, out;  // out: the results folder (absolute)
  double timeout_seconds = 3600;  // per job
  std::vector<BatchJob> jobs;
};

/**
 * Reads a manifest (path relative paths against its folder):
 *   {"name": "nightly", "out": "results", "timeout_seconds": 3600,
 *    "runs": [{"command": "grade", "task": T, "configs": [C...], "seeds": [0, 1],
 *              "split_seeds": false, "solutions": [S...], "args": ["--max-rounds", "5"]}]}
 * name (letters, digits, '.', '_', '-'; not starting with a dot) names the batch's files, and
 * defaults to the manifest's file name made safe; command defaults to grade; seeds to [0, 1] (one job with all of them, or one per seed with
 * split_seeds); a grade run needs solutions; args are passed through. Throws std::invalid_argument
 * naming the key and what is wrong.
 */
BatchManifest read_batch_manifest(const std::string& path);

/** The argv of a job (after the nibble executable): its command, --out, --device when device >= 0. */
std::vector<std::string> batch_job_argv(const BatchJob& job, int device);

/** Whether `job` is done: its report reads as a report of its task and config and its sidecar holds
 *  the job's hash. */
bool batch_job_done(const BatchJob& job);

/** What a job ended with, for the summary and the sidecar. */
struct BatchOutcome {
  int exit_code = -1;
  std::string disposition;  // the report's, else "NoReport"
  std::string reason;
  double seconds = 0;
  int device = -1;
  bool skipped = false;     // done before (resume)
  std::string report_sha256;  // the report as its job left it (or as a resume found it), "none" when there was none:
                              // run_batch checks it again at the end
};

/** Whether a job's disposition is a pass: a grade's "Passed", a calibration's "Healthy". */
inline bool batch_disposition_passed(const std::string& d) { return d == "Passed" || d == "Healthy"; }

/** What a BatchRunner returns for a job it did not start (the batch is stopping): no sidecar is
 *  written, so the job runs again on the next try. */
inline constexpr int kBatchNotRun = -2;
/** The flag of `nibble grade` and `calibrate` that parses the command line and does nothing else
 *  (exit 0, or 2 with CLI11's message): what batch_check_args runs. */
inline constexpr const char* kCheckArgsFlag = "--check-args";
/** A runner's exit code for a job it could not start (it threw: run_batch records the reason). */
inline constexpr int kBatchCouldNotStart = 127;
/** A runner's exit code for a job killed at the manifest's timeout_seconds (SIGKILL's 128 + 9, and
 *  the summary says it timed out). */
inline constexpr int kBatchTimedOut = 137;

/** Runs one job on `device` (-1: none named) and returns its exit code; the real one runs nibble. */
using BatchRunner = std::function<int(const BatchJob& job, int device)>;

/** Progress: a line for a person (jobs done / running / left, what each GPU runs). */
using BatchProgress = std::function<void(const std::string& line)>;

/**
 * Runs every job not yet done over `devices` (one job per device at a time; {-1}: one slot, no
 * device named), each by `run`, and returns an outcome per job in manifest order. A job's old report
 * and sidecar are removed before it runs (they are another job's: the solution or the arguments
 * changed), its report read after it ends (NoReport when none), and its sidecar written after it
 * ends, so a job cut off mid-way (or not run: kBatchNotRun, "NotRun") runs again next time.
 */
std::vector<BatchOutcome> run_batch(const BatchManifest& m, const std::vector<int>& devices, const BatchRunner& run,
                                    const BatchProgress& progress);

/** The summary: {"schema": "nibble.batch", counts by disposition, rows}, and its text. */
nlohmann::ordered_json batch_summary(const BatchManifest& m, const std::vector<BatchOutcome>& outcomes);
std::string format_batch_summary(const nlohmann::ordered_json& summary);

/** The results folder's file of this manifest named `kind` ("batch-summary.json", "collect.json",
 *  "leaderboard.html", "leaderboard.md"): <out>/<name>.<kind>, so manifests sharing a results
 *  folder each keep their own. */
std::string batch_results_file(const BatchManifest& m, const std::string& kind);

/** Where --slurm writes the manifest's array script: <out>/slurm/<name>.sbatch (per manifest: a
 *  results folder may be shared). */
std::string slurm_script_path(const BatchManifest& m);

/** The Slurm array script for the manifest (one element per job; --gres=gpu:1 unless no job needs a
 *  GPU). `nibble` is the executable's absolute path. */
std::string slurm_array_script(const BatchManifest& m, const std::string& nibble, const std::string& partition,
                               const std::string& time_limit);

/** --collect: per job done (its report, whatever its verdict; `not_passed` counts those that did not
 *  pass) / failed (its element ran for this job and left no report) / missing (never ran, or ran for
 *  another version of the job: stale), and the sbatch command that resubmits the failed and missing
 *  elements (`nibble batch MANIFEST` without an array script: a batch of this host; null when none). */
nlohmann::ordered_json collect_batch(const BatchManifest& m);

/** The leaderboard of the manifest's grade reports that exist (harness/lineup.h), written as
 *  <out>/<name>.leaderboard.html and .md (the manifest's name: manifests sharing a results folder
 *  keep their own); returns how many reports it ranked from (0: none written). Throws std::runtime_error when a file cannot be written. */
int write_batch_leaderboard(const BatchManifest& m);

/** `nibble batch ...` (its own argument parsing); returns the exit code. */
int batch_command(std::vector<std::string> args);

}  // namespace nibble
